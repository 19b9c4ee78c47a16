/**
 * The ES module entry of cvsm: the same Client and error classes as the CommonJS entry, so that
 * `instanceof` checks hold whichever way the package is loaded.
 * @module cvsm
 */
import cvsm from './index.js';

export const {
  Client,
  VERSION,
  CvsmError,
  ConfigurationError,
  AuthenticationError,
  PermissionDeniedError,
  SecretNotFoundError,
  RateLimitError,
  ApiError,
  NetworkError,
  DecryptionError,
} = cvsm;

export default cvsm;

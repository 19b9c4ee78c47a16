/**
 * Types of `cvsm`'s ES module entry (`lib/index.mjs`): the same as `lib/index.d.ts`, plus the
 * default export.
 * @packageDocumentation
 */
import * as cvsm from './index.js';

export * from './index.js';
/** The whole module, as `import cvsm from 'cvsm'` gives it. */
export default cvsm;

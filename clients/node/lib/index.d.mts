/** cvsm (ESM entry): the same types as lib/index.d.ts, plus the default export. */
import * as cvsm from './index.js';

export * from './index.js';
export default cvsm;

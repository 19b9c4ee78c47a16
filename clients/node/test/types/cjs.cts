// A CommonJS program (require) that reads its types from lib/index.d.ts.
import cvsm = require('cvsm');

const client: cvsm.Client = new cvsm.Client({ team: process.env.CVSM_TEAM });
export const reading: Promise<string> = client.get('API_KEY');
export const failed: boolean = new cvsm.NetworkError('down') instanceof cvsm.CvsmError;
export const unopened: boolean = new cvsm.DecryptionError('cannot be opened') instanceof cvsm.CvsmError;
export const version: string = cvsm.VERSION;

// A CommonJS program (require) that reads its types from lib/index.d.ts.
import cvsm = require('cvsm');

const client: cvsm.Client = new cvsm.Client({ team: process.env.CVSM_TEAM });
export const reading: Promise<string> = client.get('API_KEY');
export const failed: boolean = new cvsm.NetworkError('down') instanceof cvsm.CvsmError;
export const unopened: boolean = new cvsm.DecryptionError('cannot be opened') instanceof cvsm.CvsmError;
export const version: string = cvsm.VERSION;
const live: cvsm.Client = new cvsm.Client({ live: true });
export const refreshed: Promise<string> = live.refresh('DB_PASSWORD', { environment: 'staging' });
export const closing: Promise<void> = live.close();
export const up: boolean = live.liveConnected;

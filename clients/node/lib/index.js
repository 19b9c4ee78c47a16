'use strict';
/**
 * cvsm: the Node client for the cvsm secrets manager. Exports the Client and its errors.
 */

const { Client } = require('./client');
const errors = require('./errors');
const { VERSION } = require('./transport');

module.exports = { Client, VERSION, ...errors };

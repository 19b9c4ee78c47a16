"""Secrets: the audited read and versioned writes (service), bulk operations, the change stream,
share links and the export formats (dotenv, shell_export)."""

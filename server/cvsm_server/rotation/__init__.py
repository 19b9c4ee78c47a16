"""Automatic rotation of secrets: policies and runs (policy) and where a new value is applied
(targets). The master key's rotation is crypto.rekey."""

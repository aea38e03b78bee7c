"""Keys: rotating the key-encryption keys of existing backups, and keys held in a KMS."""

"""Signing secrets at rest: envelope encryption.

Every endpoint's signing secret is stored as AES-256-GCM ciphertext under a data key; the data key
is stored beside it, encrypted by a master key that never enters the database (a KMS key on AWS,
a local key file or ``TIDINGS_SECRETS_KEY`` elsewhere). ``envelope`` holds the pure cipher rules,
``master_keys`` the two kinds of master key, ``keyring`` the data keys with their cache, and
``upkeep`` the passes that encrypt what an earlier release stored in clear and move old rows to the
newest data key.
"""

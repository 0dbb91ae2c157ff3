"""Identity: SASL (PLAIN, SCRAM-SHA-256/512), SCRAM credentials, TLS. See docs/security.md."""

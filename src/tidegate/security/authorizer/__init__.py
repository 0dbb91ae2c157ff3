"""Authorization: Kafka's ACL model and StandardAuthorizer (docs/security.md)."""

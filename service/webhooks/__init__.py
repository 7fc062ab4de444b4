"""Webhooks: OpenAI's `response.*` events, signed as Standard Webhooks, sent to an owner's
endpoints from the log, at least once (docs/webhooks.md)."""

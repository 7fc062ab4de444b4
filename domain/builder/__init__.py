"""The event builder, which turns an engine's semantic deltas into OpenAI stream events:
`emit` (one delta) and `finish` (the engine's end), a module per family of deltas (`text`,
`calls`, `items`) and the content parts they stream into (`parts`)."""

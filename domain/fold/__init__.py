"""The fold of a response's log, a module per family of events: `replay` (the entry:
`evolve`, `replay`, `project`), `lifecycle`, `items`, `parts`, `summaries`, `calls`, `mcp`,
`builtins`, and the checks they share (`shared`)."""

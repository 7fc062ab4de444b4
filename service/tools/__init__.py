"""Tools a response runs: the MCP loop and tool calls as OpenAI streams them."""

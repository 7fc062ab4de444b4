"""A request and the conversation it continues turned into the engine's prompt: history, item
references, compaction, the context window, sealed reasoning.
"""

"""The create in its modes (plain, streamed, background, over a WebSocket), reads of a response
and its log, cancel and delete, and the input-token count.
"""

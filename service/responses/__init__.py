"""The Responses API's use-cases: the create (`create`) in its modes (`modes`: plain,
streamed; `sockets`: over a WebSocket), reads of a response and its log (`reads`), cancel
and delete (`stopping`), the input-token count (`tokens`) and the compaction (`compact`).
"""

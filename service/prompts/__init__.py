"""A request and the conversation it continues turned into its engine's prompt, as named
stages that `pipeline.prepare_prompt` runs once each, in this order: history (`history`; a
conversation's items: `conversation`), item references (`references`), sealed blobs
(`seal`), the input checks (`checks`), tools (`tools`), compaction (`compaction`), the
context window (`window`). A stage that refuses does so before anything is written (the
compaction's summarising response is the first write). `build` makes the `Prompt` from
what they recorded, `engine` shows it as every engine can render it, and `item_ids` names
the input items.
"""

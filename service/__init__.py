"""The use-cases, over the ports (`ports`) that the adapters implement: a package per
capability (`responses`, `prompts`, `conversations`, `tools`, `reasoning`, `work`,
`access`, `audit`, `wire`) and the parts every one of them shares (`bundle`, `settings`,
`ids`, `observe`, `status`).
"""

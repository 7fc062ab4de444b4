"""Authored gpt-oss outputs in harmony, as the model writes them after `<|start|>assistant`;
the fake sglang encodes them with the real `o200k_harmony` encoding and plays them back.

A request picks one with `[fake:NAME]` in its last user message; a prompt that ends in a
tool's answer gets `after_tool`. Fault scenarios reuse a transcript and break the stream.
"""

from __future__ import annotations

import re

REASONING_FINAL = (
    "<|channel|>analysis<|message|>The user says hello. I should greet them back briefly."
    "<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help you today?"
    "<|return|>"
)
FUNCTION_CALL = (
    "<|channel|>analysis<|message|>The user wants the weather in Tokyo. I'll call get_weather."
    "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"location":"Tokyo"}<|call|>'
)
PREAMBLE_TOOL_CALL = (
    "<|channel|>analysis<|message|>Two cities; look up Paris first.<|end|>"
    "<|start|>assistant<|channel|>commentary<|message|>Let me check the weather in Paris and "
    "Rome.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary "
    '<|constrain|>json<|message|>{"location":"Paris"}<|call|>'
)
# Codex CLI's shell tool (`exec_command`, unified exec): the Codex e2e test's tool call.
CODEX_EXEC = (
    "<|channel|>analysis<|message|>Run the command the user asked for.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.exec_command <|constrain|>json"
    '<|message|>{"cmd":"echo resplog-tool-ran"}<|call|>'
)
# Codex CLI's `apply_patch`, a custom tool: resplog shows it to the model as a function of
# one string, `input`, and the call goes back to Codex as a `custom_tool_call`.
CODEX_APPLY_PATCH = (
    "<|channel|>analysis<|message|>Create the file with apply_patch.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.apply_patch <|constrain|>json"
    '<|message|>{"input":"*** Begin Patch\\n*** Add File: hello.txt\\n+hello from resplog'
    '\\n*** End Patch\\n"}<|call|>'
)
AFTER_TOOL = (
    "<|channel|>analysis<|message|>The tool answered; report it.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>It is 20°C and sunny in Tokyo.<|return|>"
)
UNICODE = (
    "<|channel|>analysis<|message|>Reply in Japanese with an emoji.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>こんにちは 🎉 — ça va?<|return|>"
)
NO_REASONING = "<|channel|>final<|message|>Just the answer.<|return|>"
# An MCP tool loop (`[fake:mcp_loop]`, docs/mcp.md): a step per tool answer in the prompt.
MCP_LOOP = (
    "<|channel|>analysis<|message|>Echo first.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.echo <|constrain|>json"
    '<|message|>{"text":"one"}<|call|>',
    "<|channel|>analysis<|message|>Now shout.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.shout <|constrain|>json"
    '<|message|>{"text":"two"}<|call|>',
    "<|channel|>analysis<|message|>Both tools answered.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Done after two tools.<|return|>",
)

# gpt-oss's built-ins through the tool server (`[fake:builtin_loop]`, docs/mcp.md): a search,
# a python call (its code waits for the test's gate with `[fake:builtin_gate]`), a page
# opened, then the answer; a step per built-in tool answer in the prompt.
BUILTIN_LOOP = (
    "<|channel|>analysis<|message|>Search the web first.<|end|>"
    "<|start|>assistant<|channel|>analysis to=browser.search code"
    '<|message|>{"query":"resplog durable","topn":3}<|call|>',
    "<|channel|>analysis<|message|>Compute it in python.<|end|>"
    "<|start|>assistant<|channel|>analysis to=python code"
    "<|message|>print(6 * 7)  # GATE<|call|>",
    "<|channel|>analysis<|message|>Open the page.<|end|>"
    "<|start|>assistant<|channel|>analysis to=browser.open code"
    '<|message|>{"id":"https://example.test/resplog"}<|call|>',
    "<|channel|>analysis<|message|>All three tools answered.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>The answer is 42; resplog keeps a log.<|return|>",
)


def long_answer(words: int) -> str:
    """A short thought and a long answer, for cut-offs, aborts and benchmarks."""
    body = " ".join(f"word{i % 97}" for i in range(words))
    return (
        "<|channel|>analysis<|message|>A long answer is needed.<|end|>"
        f"<|start|>assistant<|channel|>final<|message|>{body}<|return|>"
    )


TRANSCRIPTS = {
    "reasoning_final": REASONING_FINAL,
    "function_call": FUNCTION_CALL,
    "preamble_tool_call": PREAMBLE_TOOL_CALL,
    "codex_exec": CODEX_EXEC,
    "codex_apply_patch": CODEX_APPLY_PATCH,
    "after_tool": AFTER_TOOL,
    "unicode": UNICODE,
    "no_reasoning": NO_REASONING,
    "mcp_loop_0": MCP_LOOP[0],
    "mcp_loop_1": MCP_LOOP[1],
    "mcp_loop_2": MCP_LOOP[2],
    **{f"builtin_loop_{i}": t.replace("  # GATE", "") for i, t in enumerate(BUILTIN_LOOP)},
    **{f"builtin_gate_{i}": t.replace("GATE", "[gate]") for i, t in enumerate(BUILTIN_LOOP)},
}
# Faults: how the stream breaks; each plays `reasoning_final`/`long` up to the break.
FAULTS = {
    "drop",  # the server dies mid-stream: connection closed mid-body
    "error_chunk",  # an error chunk, then [DONE]
    "malformed",  # a chunk that is not JSON
    "server_abort",  # sglang aborts the request itself (finish_reason abort)
    "stall",  # sends a few chunks, then nothing
    "stall_first",  # sends nothing at all
    "no_done",  # finishes but ends the body without [DONE]
    "eof",  # ends the body cleanly mid-generation, no finish, no [DONE]
    "bad_counts",  # completion_tokens that fit neither streaming style
    "long",  # no fault: a long answer (see --long-words)
}

_MARKER = re.compile(r"\[fake:([a-z_]+)\]")
_LAST_USER = re.compile(r"<\|start\|>user<\|message\|>(.*?)<\|end\|>", re.S)
_ENDS_IN_TOOL = re.compile(
    r"<\|start\|>functions\.[^<]* to=assistant<\|channel\|>[^<]*"
    r"<\|message\|>[^<]*<\|end\|><\|start\|>assistant$",
    re.S,
)


def scenario(prompt_text: str) -> str:
    """The scenario a decoded prompt asks for."""
    users = _LAST_USER.findall(prompt_text)
    if users and "[fake:mcp_loop]" in users[-1]:
        after = prompt_text.rsplit("<|start|>user", 1)[-1]
        return f"mcp_loop_{min(after.count('<|start|>functions.'), len(MCP_LOOP) - 1)}"
    for name in ("builtin_loop", "builtin_gate"):
        if users and f"[fake:{name}]" in users[-1]:
            after = prompt_text.rsplit("<|start|>user", 1)[-1]
            done = after.count("<|start|>browser.") + after.count("<|start|>python ")
            return f"{name}_{min(done, len(BUILTIN_LOOP) - 1)}"
    if _ENDS_IN_TOOL.search(prompt_text):
        return "after_tool"
    users = _LAST_USER.findall(prompt_text)
    match = _MARKER.search(users[-1]) if users else None
    return match.group(1) if match else "reasoning_final"

// The Vercel AI SDK's multi-step tool loop with its default options, as its docs show it:
// `createOpenAI({ baseURL })`, `.responses(model)`, a tool with `execute`, `stopWhen`.
// Run: node ai_sdk_tool_loop.mjs BASE_URL MODEL PROMPT MODE [MAJOR]; prints one JSON line.
// MODE: generate or stream. MAJOR: the SDK's major version, 7 (`ai` 7 with `@ai-sdk/openai`
// 4, the default) or 6 (`ai` 6 with `@ai-sdk/openai` 3, installed under the aliases `ai-6`
// and `@ai-sdk/openai-3`: package.json).
import { z } from "zod";

const [baseURL, modelId, prompt, mode, major = "7"] = process.argv.slice(2);
const PACKAGES = { 7: ["ai", "@ai-sdk/openai"], 6: ["ai-6", "@ai-sdk/openai-3"] };
if (!(major in PACKAGES)) throw new Error(`no AI SDK of major version ${major} is installed`);
const [ai, provider] = PACKAGES[major];
const { generateText, stepCountIs, streamText, tool } = await import(ai);
const { createOpenAI } = await import(provider);
const openai = createOpenAI({ baseURL, apiKey: "unused" });
const calls = [];
const options = {
  model: openai.responses(modelId),
  tools: {
    get_weather: tool({
      description: "Current weather",
      inputSchema: z.object({ location: z.string() }),
      execute: async ({ location }) => {
        calls.push(location);
        return `20C and sunny in ${location}`;
      },
    }),
  },
  stopWhen: stepCountIs(5),
  prompt,
};

let text, steps, finishReason;
if (mode === "stream") {
  const result = streamText(options);
  for await (const part of result.fullStream) {
    if (part.type === "error") throw part.error; // by default it is only logged
  }
  text = await result.text;
  steps = await result.steps;
  finishReason = await result.finishReason;
} else {
  const result = await generateText(options);
  ({ text, steps, finishReason } = result);
}
console.log(
  JSON.stringify({
    text,
    finishReason,
    calls,
    steps: steps.map((s) => ({
      finishReason: s.finishReason,
      content: s.content.map((c) => c.type),
      responseId: s.response.id,
    })),
  }),
);

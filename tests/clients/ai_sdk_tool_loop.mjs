// The Vercel AI SDK's multi-step tool loop with its default options, as its docs show it:
// `createOpenAI({ baseURL })`, `.responses(model)`, a tool with `execute`, `stopWhen`.
// Run: node ai_sdk_tool_loop.mjs BASE_URL MODEL PROMPT [stream]; prints one JSON line.
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const [baseURL, modelId, prompt, mode] = process.argv.slice(2);
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

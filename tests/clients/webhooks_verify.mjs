// openai-node's own verification of resplog's webhooks: `client.webhooks.unwrap` (openai-node
// src/resources/webhooks/webhooks.ts, src/lib/webhook-signature.ts) on each delivery a test
// received. Reads {"secret": "whsec_…", "deliveries": [{"body": "…", "headers": {…}}]} on
// stdin; prints one JSON line: each delivery's event, or the error its verification raised.
import OpenAI from "openai";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { secret, deliveries } = JSON.parse(input);
const client = new OpenAI({ apiKey: "unused", webhookSecret: secret });
const results = [];
for (const { body, headers } of deliveries) {
  try {
    results.push({ event: await client.webhooks.unwrap(body, headers) });
  } catch (err) {
    results.push({ error: `${err.constructor.name}: ${err.message}` });
  }
}
console.log(JSON.stringify(results));

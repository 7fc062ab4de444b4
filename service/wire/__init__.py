"""The OpenAI wire format: the create body's shapes (`request`), its decoding into domain
objects (`decode`, one module per part of the body) with msgspec's errors in OpenAI's words
(`rejection`), and the error body every rejection is sent in (`errors`)."""

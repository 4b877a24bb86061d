// `deltafin serve` on the bundled trained demo model (models/k3-kjv-demo), driven by the official
// OpenAI Node SDK: the answers must be readable English, not token salad.
//   node trained_sdk_test.mjs BASE_URL
// A word counts as English when wamerican's /usr/share/dict/words lists it (case-insensitive), the
// rule of tests/e2e/demo_test.cc; the King James text itself scores 97 % by it (training/README.md).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const [baseURL] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const dictionary = new Set(
  readFileSync('/usr/share/dict/words', 'utf8').split('\n').map((w) => w.toLowerCase()));

function assertEnglish(label, text) {
  const words = text.match(/[A-Za-z]+/g) ?? [];
  const known = words.filter((w) => dictionary.has(w.toLowerCase())).length;
  console.log(`${label}: ${known} of ${words.length} words in the dictionary: ${JSON.stringify(text)}`);
  assert.ok(words.length >= 15, `${label}: too few words: ${JSON.stringify(text)}`);
  assert.ok(known >= 0.8 * words.length, `${label}: not English: ${JSON.stringify(text)}`);
}

// A plain continuation through /v1/completions.
const completion = await client.completions.create({
  model: 'k3-kjv-demo', prompt: 'And God said unto Moses,', max_tokens: 40 });
assert.equal(completion.choices.length, 1);
assertEnglish('completions', completion.choices[0].text);

// A chat turn, streamed. The model was trained on the Bible alone and never saw K3's thinking
// markers, so with thinking on it would think forever (every token lands in reasoning_content);
// with thinking off (K3's chat_template_kwargs) the text arrives in content.
const stream = await client.chat.completions.create({
  model: 'k3-kjv-demo', max_tokens: 40, stream: true,
  messages: [{ role: 'user', content: 'Who led the children of Israel out of Egypt?' }],
  chat_template_kwargs: { thinking: false },
});
let content = '';
let reasoning = '';
let finish = null;
for await (const chunk of stream) {
  for (const c of chunk.choices) {
    content += c.delta?.content ?? '';
    reasoning += c.delta?.reasoning_content ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
}
assert.equal(reasoning, '', 'thinking was off');
assert.ok(finish === 'length' || finish === 'stop', `finish_reason ${finish}`);
assertEnglish('chat (streamed)', content);
console.log('trained-model SDK checks passed');

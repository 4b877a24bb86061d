// Constrained JSON output and the persistent prefix cache of `deltafin serve`, driven by the
// official OpenAI and Anthropic Node SDKs (run_json_cache_sdk_test.sh runs the three modes):
//   node json_cache_sdk_test.mjs json   BASE_URL             JSON output through all three APIs
//   node json_cache_sdk_test.mjs before BASE_URL STATE_FILE  first requests; answers saved
//   node json_cache_sdk_test.mjs after  BASE_URL STATE_FILE  after a restart: reused and the same
// The tiny random model writes meaningless tokens, so JSON answers are checked by parsing and by an
// independent validator of the schema subset (not the server's automaton), and the cache by the
// usage fields the SDKs expose and by greedy answers that must not change across the restart.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { runTests } from './test_runner.mjs';
import { valid } from './schema_check.mjs';

const [mode, baseURL, stateFile] = process.argv.slice(2);
const root = baseURL.replace(/\/v1$/, '');
const openai = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 300000 });
const anthropic = new Anthropic({ baseURL: root, apiKey: 'unused', maxRetries: 0,
  timeout: 300000 });

const SCHEMA = {
  type: 'object',
  properties: {
    mood: { enum: ['ok', 'sad', 3] },
    n: { type: 'integer' },
    ok: { type: 'boolean' },
    s: { type: 'string', maxLength: 4 },
    tags: { type: 'array', items: { type: 'boolean' }, maxItems: 2 },
    x: { type: 'null' },
  },
  required: ['mood', 'n', 'ok', 's'],
  additionalProperties: false,
};
const ask = [{ role: 'user', content: 'Describe the weather as JSON.' }];

function parsesAndValidates(text, what) {
  let v;
  try {
    v = JSON.parse(text);
  } catch (e) {
    assert.fail(`${what}: not JSON (${e.message}): ${JSON.stringify(text)}`);
  }
  assert.ok(valid(SCHEMA, v), `${what}: does not validate: ${text}`);
}

const chatFormat = { type: 'json_schema', json_schema: { name: 'w', strict: true, schema: SCHEMA } };
const flatFormat = { type: 'json_schema', name: 'w', strict: true, schema: SCHEMA };

const jsonTests = [
  ['chat: 12 seeded json_schema answers at temperature 1 parse and validate', async () => {
    for (let seed = 0; seed < 12; seed++) {
      const r = await openai.chat.completions.create({ model: 'x', messages: ask,
        response_format: chatFormat, temperature: 1, seed, max_tokens: 400 });
      assert.equal(r.choices[0].finish_reason, 'stop', `seed ${seed}`);
      parsesAndValidates(r.choices[0].message.content, `seed ${seed}`);
    }
  }],
  ['chat: a streamed json_schema answer equals the non-streamed one', async () => {
    const req = { model: 'x', messages: ask, response_format: chatFormat, temperature: 1,
      seed: 3, max_tokens: 400 };
    const whole = await openai.chat.completions.create(req);
    let text = '';
    for await (const c of await openai.chat.completions.create({ ...req, stream: true })) {
      text += c.choices[0]?.delta?.content ?? '';
    }
    assert.equal(text, whole.choices[0].message.content);
    parsesAndValidates(text, 'streamed');
  }],
  ['chat: json_object answers that end are JSON objects', async () => {
    let ended = 0;
    for (let seed = 0; seed < 4; seed++) {
      const r = await openai.chat.completions.create({ model: 'x', messages: ask,
        response_format: { type: 'json_object' }, temperature: 1, seed: 100 + seed,
        max_tokens: 300 });
      if (r.choices[0].finish_reason === 'length') continue;  // free JSON may run on
      ended++;
      const v = JSON.parse(r.choices[0].message.content);
      assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), JSON.stringify(v));
    }
    assert.ok(ended >= 1, 'no json_object answer ended within 300 tokens');
  }],
  ['responses: text.format json_schema, whole and streamed', async () => {
    const req = { model: 'x', input: 'Describe the weather as JSON.', text: { format: flatFormat },
      temperature: 1, max_output_tokens: 400 };
    const whole = await openai.responses.create(req);
    assert.equal(whole.status, 'completed');
    parsesAndValidates(whole.output_text, 'responses');
    let deltas = '';
    let completed = null;
    for await (const ev of await openai.responses.create({ ...req, stream: true })) {
      if (ev.type === 'response.output_text.delta') deltas += ev.delta;
      if (ev.type === 'response.completed') completed = ev.response;
    }
    assert.ok(completed, 'no response.completed event');
    assert.equal(deltas, completed.output_text ?? completed.output.filter((o) => o.type ===
      'message').flatMap((o) => o.content).map((c) => c.text).join(''));
    parsesAndValidates(deltas, 'responses stream');
  }],
  ['messages: output_config.format and the beta output_format give validating JSON', async () => {
    for (const extra of [{ output_config: { format: { type: 'json_schema', schema: SCHEMA } } },
      { output_format: { type: 'json_schema', schema: SCHEMA } }]) {
      const m = await anthropic.messages.create({ model: 'x', max_tokens: 400, messages: ask,
        temperature: 1, ...extra });
      assert.equal(m.stop_reason, 'end_turn', JSON.stringify(m));
      const text = m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
      parsesAndValidates(text, Object.keys(extra)[0]);
    }
  }],
  ['an unsupported schema keyword is a 400 naming it, through each SDK', async () => {
    const bad = { type: 'string', pattern: '^a' };
    await assert.rejects(openai.chat.completions.create({ model: 'x', messages: ask,
      response_format: { type: 'json_schema', json_schema: { name: 'b', schema: bad } } }),
    (e) => e instanceof OpenAI.BadRequestError && /'pattern'/.test(e.message) &&
      e.param === 'response_format.json_schema.schema');
    await assert.rejects(openai.responses.create({ model: 'x', input: 'hi',
      text: { format: { type: 'json_schema', name: 'b', schema: bad } } }),
    (e) => e instanceof OpenAI.BadRequestError && /'pattern'/.test(e.message));
    await assert.rejects(anthropic.messages.create({ model: 'x', max_tokens: 4, messages: ask,
      output_config: { format: { type: 'json_schema', schema: bad } } }),
    (e) => e instanceof Anthropic.BadRequestError && /'pattern'/.test(e.message) &&
      e.error?.error?.type === 'invalid_request_error');
  }],
];

// A ~700-token system prompt shared by every cache request (the agent preamble case).
function systemPrompt() {
  const words = ['river', 'stone', 'lamp', 'quiet', 'north', 'paper', 'seven', 'orbit', 'glass'];
  let x = 5;
  const out = [];
  for (let i = 0; i < 320; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    out.push(words[x % words.length]);
  }
  return 'You are a careful assistant. ' + out.join(' ');
}
const system = systemPrompt();
async function chatGreedy(question) {
  const r = await openai.chat.completions.create({ model: 'x', max_tokens: 8, temperature: 0,
    messages: [{ role: 'system', content: system }, { role: 'user', content: question }] });
  const u = r.usage;
  return { text: r.choices[0].message.content, prompt: u.prompt_tokens,
    cached: u.prompt_tokens_details?.cached_tokens ?? 0 };
}
async function messagesGreedy(question) {
  const m = await anthropic.messages.create({ model: 'x', max_tokens: 8, temperature: 0, system,
    messages: [{ role: 'user', content: question }] });
  const u = m.usage;
  return { text: m.content.filter((b) => b.type === 'text').map((b) => b.text).join(''),
    prompt: u.input_tokens + u.cache_read_input_tokens, cached: u.cache_read_input_tokens };
}
// Most of the prompt is the system preamble; the rest is the question and the template's tail.
const mostOf = (r) => r.cached >= 0.85 * r.prompt;

const beforeTests = [
  ['before the restart: the preamble is cached after the first request of each SDK', async () => {
    const first = await chatGreedy('hello');
    assert.equal(first.cached, 0, 'a fresh cache reported cached tokens');
    assert.ok(first.prompt >= 500, `the prompt is only ${first.prompt} tokens`);
    const second = await chatGreedy('something else entirely');
    assert.ok(mostOf(second), `openai: ${second.cached} of ${second.prompt} cached`);
    const m1 = await messagesGreedy('hello');
    const m2 = await messagesGreedy('another question');
    assert.ok(mostOf(m2), `anthropic: ${m2.cached} of ${m2.prompt} cached`);
    writeFileSync(stateFile, JSON.stringify({ chat: first, messages: m1 }));
    console.log(`# openai ${second.cached}/${second.prompt} cached, anthropic ` +
      `${m2.cached}/${m2.prompt} cached`);
  }],
];

const afterTests = [
  ['after a restart: both SDKs report the cached preamble and greedy answers are unchanged',
    async () => {
      const saved = JSON.parse(readFileSync(stateFile, 'utf8'));
      const chat = await chatGreedy('hello');
      assert.ok(mostOf(chat), `openai after restart: ${chat.cached} of ${chat.prompt} cached`);
      assert.equal(chat.prompt, saved.chat.prompt);
      assert.equal(chat.text, saved.chat.text, 'greedy chat answer changed after the restart');
      const m = await messagesGreedy('hello');
      assert.ok(mostOf(m), `anthropic after restart: ${m.cached} of ${m.prompt} cached`);
      assert.equal(m.prompt, saved.messages.prompt);
      assert.equal(m.text, saved.messages.text, 'greedy Messages answer changed after restart');
      console.log(`# openai ${chat.cached}/${chat.prompt} cached, anthropic ` +
        `${m.cached}/${m.prompt} cached, answers identical`);
    }],
];

const tests = { json: jsonTests, before: beforeTests, after: afterTests }[mode];
assert.ok(tests, `unknown mode ${mode}`);
await runTests(tests);

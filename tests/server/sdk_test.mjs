// End-to-end test of `deltafin serve` with the official OpenAI Node SDK as the client.
//   node sdk_test.mjs DELTAFIN_BINARY MODEL_DIR BASE_URL AUTH_BASE_URL API_KEY
// BASE_URL: a server with --max-queue 1 and no key; AUTH_BASE_URL: a server with --api-key.
// Each check throws on failure; the process exits non-zero on the first failure.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { runTests } from './test_runner.mjs';

const [bin, model, baseURL, authBaseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const root = baseURL.replace(/\/v1$/, '');
const chat = [{ role: 'user', content: 'Hello! What is the capital of France?' }];

async function metric(name) {
  const text = await (await fetch(root + '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  assert.ok(line, `metric ${name} missing`);
  return Number(line.split(' ')[1]);
}

async function collect(stream) {
  const out = { content: '', reasoning: '', chunks: [], finish: null, usage: null, tools: [] };
  for await (const chunk of stream) {
    out.chunks.push(chunk);
    if (chunk.usage) out.usage = chunk.usage;
    for (const c of chunk.choices) {
      out.content += c.delta?.content ?? c.text ?? '';
      out.reasoning += c.delta?.reasoning_content ?? '';
      if (c.finish_reason) out.finish = c.finish_reason;
    }
  }
  return out;
}

const tests = [];
const test = (name, fn) => tests.push([name, fn]);

test('models and health', async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].object, 'model');
  const health = await (await fetch(root + '/health/')).json();
  assert.deepEqual(health, { status: 'ok' });
});

test('completion equals `deltafin run` greedy output', async () => {
  const ids = [72, 101, 108, 108, 111, 32, 119];
  // `run` prints the text on stdout and writes the ids to --ids-out.
  const idsFile = join(mkdtempSync(join(tmpdir(), 'deltafin-sdk-')), 'ids.json');
  execFileSync(bin, ['run', '--model', model, '--prompt-ids', ids.join(','), '--max-new', '10',
    '--ids-out', idsFile], { stdio: ['ignore', 'ignore', 'ignore'] });
  const runIds = JSON.parse(readFileSync(idsFile, 'utf8'));
  assert.equal(runIds.length, 10, 'the greedy run must not hit EOS within 10 tokens');
  const r = await client.completions.create({ model: 'x', prompt: ids, max_tokens: 10 });
  const decoded = execFileSync(bin, ['tokenize', '--model', model, '--decode'],
    { input: runIds.join(','), encoding: 'utf8' });
  assert.equal(r.choices[0].text, decoded);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.prompt_tokens, ids.length);
  assert.equal(r.usage.completion_tokens, 10);
});

test('chat: non-streaming and streaming give the same greedy answer', async () => {
  const full = await client.chat.completions.create({ model: 'x', messages: chat, max_tokens: 12 });
  assert.equal(full.object, 'chat.completion');
  const m = full.choices[0].message;
  assert.equal(m.role, 'assistant');
  assert.equal(full.choices[0].finish_reason, 'length');
  assert.equal(full.usage.completion_tokens, 12);
  assert.ok(full.usage.prompt_tokens > 100, 'thinking-effort system message rendered');
  const s = await collect(await client.chat.completions.create(
    { model: 'x', messages: chat, max_tokens: 12, stream: true }));
  assert.equal(s.reasoning, m.reasoning_content ?? '');
  assert.equal(s.content, m.content ?? '');
  assert.equal(s.finish, 'length');
  assert.equal(s.usage, null, 'no usage chunk unless include_usage');
  assert.equal(s.chunks[0].choices[0].delta.role, 'assistant');
  assert.ok(s.chunks.every((c) => c.id === s.chunks[0].id && c.object === 'chat.completion.chunk'));
});

test('streaming with include_usage and max_completion_tokens', async () => {
  const s = await collect(await client.chat.completions.create({
    model: 'x', messages: chat, max_completion_tokens: 5, stream: true,
    stream_options: { include_usage: true }, reasoning_effort: 'none' }));
  const last = s.chunks[s.chunks.length - 1];
  assert.deepEqual(last.choices, []);
  assert.equal(s.usage.completion_tokens, 5);
  assert.equal(s.usage.total_tokens, s.usage.prompt_tokens + 5);
  assert.equal(s.finish, 'length');
  assert.equal(s.reasoning, '', 'reasoning_effort none: response channel only');
  assert.ok(s.chunks.slice(0, -1).every((c) => c.usage === null));
});

test('seeded sampling is reproducible; temperature 0 is greedy', async () => {
  const req = { model: 'x', prompt: 'The capital of France is', max_tokens: 12 };
  const a = await client.completions.create({ ...req, temperature: 1.0, seed: 42 });
  const b = await client.completions.create({ ...req, temperature: 1.0, seed: 42, top_p: 1 });
  const c = await client.completions.create({ ...req, temperature: 1.0, seed: 43 });
  const g1 = await client.completions.create({ ...req });
  const g2 = await client.completions.create({ ...req, seed: 7, temperature: 0 });
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.notEqual(a.choices[0].text, c.choices[0].text);
  assert.equal(g1.choices[0].text, g2.choices[0].text);
});

test('stop sequences: cut before the stop, finish_reason stop, streaming too', async () => {
  const req = { model: 'x', prompt: 'The capital of France is', max_tokens: 16 };
  const full = (await client.completions.create(req)).choices[0].text;
  const chars = [...full];
  assert.ok(chars.length >= 8, `greedy text too short: ${JSON.stringify(full)}`);
  const stop = chars.slice(4, 6).join('');
  const expected = full.slice(0, full.indexOf(stop));
  const r = await client.completions.create({ ...req, stop: [stop, '\u0001never'] });
  assert.equal(r.choices[0].text, expected);
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await collect(await client.completions.create({ ...req, stop, stream: true }));
  assert.equal(s.content, expected);
  assert.equal(s.finish, 'stop');
});

test('tool-call round trip: tools, assistant tool_calls and a tool result are rendered', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather',
    parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
  const messages = [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c":21}' },
  ];
  const r = await client.chat.completions.create({ model: 'x', messages, tools, max_tokens: 4,
    tool_choice: 'auto' });
  // The prompt is exactly K3's template rendering (the same ids as `deltafin tokenize --chat`).
  const file = process.env.WORK_DIR + '/tool_chat.json';
  writeFileSync(file, JSON.stringify({ messages, tools }));
  const ids = JSON.parse(execFileSync(bin, ['tokenize', '--model', model, '--chat', file],
    { encoding: 'utf8' }));
  assert.equal(r.usage.prompt_tokens, ids.length);
  assert.ok(['length', 'stop', 'tool_calls'].includes(r.choices[0].finish_reason));
  // A tool result naming an unknown call is a clean 400.
  await assert.rejects(client.chat.completions.create({ model: 'x', max_tokens: 1,
    messages: [messages[0], messages[1], { role: 'tool', tool_call_id: 'nope', content: 'x' }] }),
  (e) => e instanceof OpenAI.BadRequestError);
});

test('400: unsupported and malformed fields raise BadRequestError naming the field', async () => {
  for (const [extra, param] of [[{ n: 2 }, 'n'], [{ logit_bias: { 5: 1 } }, 'logit_bias'],
    [{ temperature: 'hot' }, 'temperature'], [{ stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop']]) {
    await assert.rejects(
      client.chat.completions.create({ model: 'x', messages: chat, max_tokens: 1, ...extra }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === param &&
        e.error?.type === 'invalid_request_error');
  }
  // Harmless unknown fields are ignored.
  const r = await client.chat.completions.create({ model: 'x', messages: chat, max_tokens: 1,
    user: 'u', metadata: { a: 'b' }, store: false, some_future_field: 1 });
  assert.equal(r.usage.completion_tokens, 1);
});

test('401: wrong or missing key raises AuthenticationError; the right key works', async () => {
  const bad = new OpenAI({ baseURL: authBaseURL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError &&
    e.status === 401 && e.code === 'invalid_api_key');
  const good = new OpenAI({ baseURL: authBaseURL, apiKey, maxRetries: 0 });
  const r = await good.chat.completions.create({ model: 'x', messages: chat, max_tokens: 1 });
  assert.equal(r.choices.length, 1);
});

test('429 when the queue is full; an aborted stream cancels its work', async () => {
  const cancelledBefore = await metric('deltafin_requests_cancelled_total');
  const tokensBefore = await metric('deltafin_completion_tokens_total');
  const controller = new AbortController();
  const long = await client.chat.completions.create({ model: 'x', messages: chat,
    max_tokens: 3000, stream: true }, { signal: controller.signal });
  const it = long[Symbol.asyncIterator]();
  await it.next();  // generation has started: the engine is busy
  // --max-queue 1: one request may wait (it runs once the stream is cancelled), the rest get 429
  // with Retry-After at once.
  const pending = [1, 2, 3].map(() => client.chat.completions.create(
    { model: 'x', messages: chat, max_tokens: 1 }).then((v) => ({ v }), (e) => ({ e })));
  const rejected = [];
  for (const p of pending) p.then((r) => r.e && rejected.push(r.e));
  const tw = Date.now();
  while (rejected.length < 2) {
    assert.ok(Date.now() - tw < 5000, 'expected two immediate 429s');
    await new Promise((r) => setTimeout(r, 20));
  }
  for (const e of rejected) {
    assert.ok(e instanceof OpenAI.RateLimitError, String(e));
    assert.equal(e.status, 429);
    assert.ok(Number(e.headers.get('retry-after')) > 0);
  }
  assert.equal(await metric('deltafin_queue_length'), 1);
  controller.abort();
  const settled = await Promise.all(pending);
  assert.equal(settled.filter((r) => r.v).length, 1, 'the queued request completes');
  const t0 = Date.now();
  while (await metric('deltafin_requests_cancelled_total') < cancelledBefore + 1) {
    assert.ok(Date.now() - t0 < 5000, 'the aborted stream was not cancelled');
    await new Promise((r) => setTimeout(r, 50));
  }
  while (await metric('deltafin_requests_running') !== 0 || await metric('deltafin_queue_length') !== 0) {
    assert.ok(Date.now() - t0 < 10000, 'the engine did not go idle');
    await new Promise((r) => setTimeout(r, 50));
  }
  const generated = await metric('deltafin_completion_tokens_total') - tokensBefore;
  assert.ok(generated < 1000, `cancelled generation ran on: ${generated} tokens`);
});

await runTests(tests);

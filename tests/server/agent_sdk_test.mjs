// End-to-end test of `deltafin serve`'s agent APIs with the official SDKs as clients: the
// Anthropic Node SDK on /v1/messages and the OpenAI Node SDK on /v1/responses.
//   node agent_sdk_test.mjs BASE_URL AUTH_BASE_URL API_KEY
// BASE_URL: a server with no key; AUTH_BASE_URL: a server with --api-key. The tiny random model
// writes meaningless tokens, so these check structure and protocol, not content; a tool call is
// made deterministic by forcing it (tool_choice), which puts the call's header in the prompt.
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { runTests } from './test_runner.mjs';

const [baseURL, authBaseURL, apiKey] = process.argv.slice(2);
const root = baseURL.replace(/\/v1$/, '');
const anthropic = new Anthropic({ baseURL: root, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const openai = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const user = [{ role: 'user', content: 'Hello! What is the weather in Paris?' }];
const weather = { name: 'get_weather', description: 'Current weather',
  input_schema: { type: 'object', properties: { city: { type: 'string' } } } };
const fnWeather = { type: 'function', name: 'get_weather', description: 'Current weather',
  parameters: weather.input_schema };

async function metric(name) {
  const text = await (await fetch(root + '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  assert.ok(line, `metric ${name} missing`);
  return Number(line.split(' ')[1]);
}

const tests = [];
const test = (name, fn) => tests.push([name, fn]);

test('messages: non-streaming shape, usage and max_tokens', async () => {
  const m = await anthropic.messages.create({ model: 'claude-x', max_tokens: 6, messages: user,
    system: 'Be brief.' });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.usage.output_tokens, 6);
  assert.ok(m.usage.input_tokens > 5);
  assert.equal(typeof m.usage.cache_read_input_tokens, 'number');
  assert.equal(m.usage.cache_creation_input_tokens, 0);
  for (const b of m.content) assert.ok(['text', 'thinking'].includes(b.type), b.type);
  // count_tokens counts the same prompt (cached + uncached input).
  const c = await anthropic.messages.countTokens({ model: 'claude-x', messages: user,
    system: 'Be brief.' });
  assert.equal(c.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
});

test('messages: the stream has the exact event sequence and matches the whole answer', async () => {
  const req = { model: 'claude-x', max_tokens: 10, messages: user,
    thinking: { type: 'enabled', budget_tokens: 1024 } };
  const whole = await anthropic.messages.create(req);
  const stream = await anthropic.messages.create({ ...req, stream: true });
  const types = [];
  let open = null;
  let text = '';
  let thinking = '';
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'content_block_start') {
      assert.equal(open, null, 'a block was still open');
      open = ev.index;
    } else if (ev.type === 'content_block_delta') {
      assert.equal(ev.index, open);
      if (ev.delta.type === 'text_delta') text += ev.delta.text;
      if (ev.delta.type === 'thinking_delta') thinking += ev.delta.thinking;
    } else if (ev.type === 'content_block_stop') {
      assert.equal(ev.index, open);
      open = null;
    } else if (ev.type === 'message_delta') {
      assert.equal(ev.delta.stop_reason, 'max_tokens');
      assert.equal(ev.usage.output_tokens, 10);
    }
  }
  assert.equal(types[0], 'message_start');
  assert.deepEqual(types.slice(-2), ['message_delta', 'message_stop']);
  assert.equal(open, null);
  const wholeText = whole.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
  const wholeThinking = whole.content.filter((b) => b.type === 'thinking')
    .map((b) => b.thinking).join('');
  assert.equal(text, wholeText);
  assert.equal(thinking, wholeThinking);
  // The SDK's stream helper assembles the same message.
  const final = await anthropic.messages.stream(req).finalMessage();
  assert.deepEqual(final.content, whole.content);
});

test('messages: forced tool_use, then tool_result, then an answer', async () => {
  const req = { model: 'claude-x', max_tokens: 12, messages: user, tools: [weather],
    tool_choice: { type: 'tool', name: 'get_weather' } };
  const m = await anthropic.messages.create(req);
  const use = m.content.find((b) => b.type === 'tool_use');
  assert.ok(use, JSON.stringify(m.content));
  assert.equal(use.name, 'get_weather');
  assert.match(use.id, /^toolu_/);
  assert.equal(typeof use.input, 'object');
  assert.ok(['tool_use', 'max_tokens'].includes(m.stop_reason), m.stop_reason);
  // Streamed: a tool_use block with an input_json_delta the SDK parses.
  const s = anthropic.messages.stream(req);
  const final = await s.finalMessage();
  const streamedUse = final.content.find((b) => b.type === 'tool_use');
  assert.equal(streamedUse.name, 'get_weather');
  assert.deepEqual(streamedUse.input, use.input);
  // Round trip.
  const answer = await anthropic.messages.create({ model: 'claude-x', max_tokens: 4,
    tools: [weather], messages: [...user, { role: 'assistant', content: m.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id,
        content: '{"temp_c":21}' }] }] });
  assert.equal(answer.type, 'message');
  assert.equal(answer.usage.output_tokens, 4);
  // any / none are accepted.
  for (const tool_choice of [{ type: 'any' }, { type: 'none' }, { type: 'auto' }]) {
    const r = await anthropic.messages.create({ ...req, max_tokens: 2, tool_choice });
    assert.equal(r.type, 'message');
  }
});

test('messages: errors are Anthropic-shaped and name the field', async () => {
  const cases = [
    [{ messages: user }, 'max_tokens'],
    [{ max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'video' }] }] },
      'messages[0].content[0].type'],
    [{ max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'tool_result',
      tool_use_id: 'toolu_nope', content: 'x' }] }] }, 'messages[0].content[0].tool_use_id'],
  ];
  for (const [body, field] of cases) {
    await assert.rejects(anthropic.messages.create({ model: 'claude-x', ...body }),
      (e) => e instanceof Anthropic.BadRequestError && e.status === 400 &&
        e.error?.type === 'error' && e.error?.error?.type === 'invalid_request_error' &&
        e.error.error.message.includes(field));
  }
  const bad = new Anthropic({ baseURL: authBaseURL.replace(/\/v1$/, ''), apiKey: 'wrong',
    maxRetries: 0 });
  await assert.rejects(bad.messages.create({ model: 'c', max_tokens: 1, messages: user }),
    (e) => e instanceof Anthropic.AuthenticationError &&
      e.error?.error?.type === 'authentication_error');
  const good = new Anthropic({ baseURL: authBaseURL.replace(/\/v1$/, ''), apiKey,
    maxRetries: 0 });
  const ok = await good.messages.create({ model: 'c', max_tokens: 1, messages: user });
  assert.equal(ok.usage.output_tokens, 1);
});

test('messages: an aborted stream is cancelled and the next request is served', async () => {
  const cancelledBefore = await metric('deltafin_requests_cancelled_total');
  const stream = await anthropic.messages.create({ model: 'claude-x', max_tokens: 3000,
    messages: user, stream: true });
  let n = 0;
  for await (const ev of stream) {
    if (ev.type === 'content_block_delta' && ++n === 2) break;  // break aborts the request
  }
  const t0 = Date.now();
  while (await metric('deltafin_requests_cancelled_total') < cancelledBefore + 1) {
    assert.ok(Date.now() - t0 < 5000, 'the aborted stream was not cancelled');
    await new Promise((r) => setTimeout(r, 50));
  }
  const next = await anthropic.messages.create({ model: 'claude-x', max_tokens: 2,
    messages: user });
  assert.equal(next.usage.output_tokens, 2);
});

test('responses: plain, output_text and usage', async () => {
  const r = await openai.responses.create({ model: 'x', input: 'Hello!', max_output_tokens: 6,
    instructions: 'Be brief.' });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.usage.output_tokens, 6);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
  assert.equal(typeof r.output_text, 'string');
  for (const item of r.output) assert.ok(['message', 'reasoning'].includes(item.type), item.type);
});

test('responses: stream events are numbered, ordered and end with the response', async () => {
  const req = { model: 'x', input: 'Hello!', max_output_tokens: 8 };
  const whole = await openai.responses.create(req);
  const stream = await openai.responses.create({ ...req, stream: true });
  const events = [];
  for await (const ev of stream) events.push(ev);
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  assert.equal(events[0].type, 'response.created');
  assert.equal(events[1].type, 'response.in_progress');
  const last = events[events.length - 1];
  assert.equal(last.type, 'response.incomplete');
  assert.equal(last.response.usage.output_tokens, 8);
  let text = '';
  let reasoning = '';
  for (const e of events) {
    if (e.type === 'response.output_text.delta') text += e.delta;
    if (e.type === 'response.reasoning_text.delta') reasoning += e.delta;
  }
  assert.equal(text, whole.output_text);
  const wholeReasoning = whole.output.filter((i) => i.type === 'reasoning')
    .map((i) => i.content.map((c) => c.text).join('')).join('');
  assert.equal(reasoning, wholeReasoning);
  const added = events.filter((e) => e.type === 'response.output_item.added').length;
  const done = events.filter((e) => e.type === 'response.output_item.done').length;
  assert.equal(added, done);
  assert.equal(added, last.response.output.length);
});

test('responses: forced function call, output round trip, previous_response_id', async () => {
  const first = await openai.responses.create({ model: 'x', input: 'Weather in Paris?',
    tools: [fnWeather], tool_choice: { type: 'function', name: 'get_weather' },
    max_output_tokens: 12, reasoning: { effort: 'low' } });
  const call = first.output.find((i) => i.type === 'function_call');
  assert.ok(call, JSON.stringify(first.output));
  assert.equal(call.name, 'get_weather');
  assert.match(call.call_id, /^call_/);
  // Streamed: the arguments events.
  const stream = await openai.responses.create({ model: 'x', input: 'Weather in Paris?',
    tools: [fnWeather], tool_choice: { type: 'function', name: 'get_weather' },
    max_output_tokens: 12, reasoning: { effort: 'low' }, stream: true });
  const types = [];
  for await (const ev of stream) types.push(ev.type);
  assert.ok(types.includes('response.function_call_arguments.delta'));
  assert.ok(types.includes('response.function_call_arguments.done'));
  // Continue from the stored response with the function's output only.
  const second = await openai.responses.create({ model: 'x', previous_response_id: first.id,
    tools: [fnWeather], max_output_tokens: 3,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp_c":21}' }] });
  assert.equal(second.previous_response_id, first.id);
  assert.ok(second.usage.input_tokens > first.usage.input_tokens);
  // Without the stored state the call id is unknown: a 400 naming the field.
  await assert.rejects(openai.responses.create({ model: 'x', max_output_tokens: 1,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: 'x' }] }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'input[0].call_id');
  // store: false is not kept.
  const unstored = await openai.responses.create({ model: 'x', input: 'hi', store: false,
    max_output_tokens: 1 });
  await assert.rejects(openai.responses.create({ model: 'x', input: 'again',
    previous_response_id: unstored.id, max_output_tokens: 1 }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id');
});

test('chat completions: tool_choice required / named / none are honoured', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather',
    parameters: weather.input_schema } }];
  const named = await openai.chat.completions.create({ model: 'x', messages: user, tools,
    max_tokens: 12, tool_choice: { type: 'function', function: { name: 'get_weather' } } });
  const calls = named.choices[0].message.tool_calls;
  assert.ok(calls && calls.length >= 1, JSON.stringify(named.choices[0]));
  assert.equal(calls[0].function.name, 'get_weather');
  for (const tool_choice of ['required', 'none']) {
    const r = await openai.chat.completions.create({ model: 'x', messages: user, tools,
      max_tokens: 2, tool_choice });
    assert.equal(r.object, 'chat.completion');
  }
  const none = await openai.chat.completions.create({ model: 'x', messages: user, tools,
    max_tokens: 12, tool_choice: 'none' });
  assert.equal(none.choices[0].message.tool_calls, undefined);
});

await runTests(tests);

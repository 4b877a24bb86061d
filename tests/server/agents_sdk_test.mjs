// What agents rely on (docs/SERVER.md "Tool calls", "Budget-aware closing", "Logprobs",
// "Penalties"), driven by the pinned official OpenAI and Anthropic Node SDKs against
// `deltafin serve` on the tiny random-weight model (run_agents_sdk_test.sh):
//   node agents_sdk_test.mjs BASE_URL BIN MODEL_DIR WORK_DIR
// - forced tool calls on chat completions, Messages and Responses: 30 seeded sampled runs per API
//   (half streamed) at max_tokens 64, each a call whose arguments parse and validate against the
//   tool's schema (an independent validator below, not the server's automaton);
// - json_schema at temperature 1 with max_completion_tokens 96: 50 seeded answers parse and
//   validate, however the budget cuts them;
// - logprobs: a prompt and its greedy continuation against `deltafin logits` (log-softmax at each
//   position within 1e-5, top_logprobs the true top-k in order), echo's prompt logprobs, and the
//   chat / Responses shapes, streamed and not;
// - penalties: accepted, deterministic with a seed, and acting (a greedy answer changes).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { runTests } from './test_runner.mjs';
import { valid } from './schema_check.mjs';

const [baseURL, bin, modelDir, workDir] = process.argv.slice(2);
const root = baseURL.replace(/\/v1$/, '');
const openai = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 300000 });
const anthropic = new Anthropic({ baseURL: root, apiKey: 'unused', maxRetries: 0,
  timeout: 300000 });

function check(schema, value, what) {
  assert.ok(valid(schema, value), `${what}: does not validate: ${JSON.stringify(value)}`);
}
function parse(text, what) {
  try {
    return JSON.parse(text);
  } catch (e) {
    return assert.fail(`${what}: not JSON (${e.message}): ${JSON.stringify(text)}`);
  }
}

const WEATHER = {
  type: 'object',
  properties: {
    city: { type: 'string', minLength: 1 },
    unit: { enum: ['c', 'f'] },
    days: { type: 'integer' },
    where: { type: 'object', properties: { lat: { type: 'number' }, lon: { type: 'number' } },
      required: ['lat', 'lon'], additionalProperties: false },
  },
  required: ['city', 'where'],
  additionalProperties: false,
};
const TIME = {
  type: 'object',
  properties: { zones: { type: 'array', items: { type: 'string', maxLength: 8 }, minItems: 1 } },
  required: ['zones'],
};
const schemaOf = { get_weather: WEATHER, get_time: TIME };
const user = [{ role: 'user', content: 'What is the weather in Paris?' }];
const RUNS = 30;

// One forced call per run, from a seeded temperature-1 draw, checked against its tool's schema.
async function chatCall(seed, stream) {
  const tools = Object.entries(schemaOf).map(([name, parameters]) =>
    ({ type: 'function', function: { name, parameters } }));
  // Even seeds: required (the model picks the tool); odd: named.
  const tool_choice = seed % 2 === 0 ? 'required'
    : { type: 'function', function: { name: 'get_weather' } };
  const req = { model: 'x', messages: user, tools, tool_choice, temperature: 1, seed,
    max_tokens: 64 };
  if (!stream) {
    const r = await openai.chat.completions.create(req);
    const calls = r.choices[0].message.tool_calls ?? [];
    assert.ok(calls.length >= 1, `seed ${seed}: no call: ${JSON.stringify(r.choices[0])}`);
    return calls.map((c) => [c.function.name, c.function.arguments]);
  }
  const args = new Map();
  for await (const c of await openai.chat.completions.create({ ...req, stream: true })) {
    for (const t of c.choices[0]?.delta?.tool_calls ?? []) {
      const a = args.get(t.index) ?? { name: '', arguments: '' };
      a.name += t.function?.name ?? '';
      a.arguments += t.function?.arguments ?? '';
      args.set(t.index, a);
    }
  }
  assert.ok(args.size >= 1, `seed ${seed}: no streamed call`);
  return [...args.values()].map((a) => [a.name, a.arguments]);
}

async function messagesCall(seed, stream) {
  const tools = Object.entries(schemaOf).map(([name, input_schema]) => ({ name, input_schema }));
  const tool_choice = seed % 2 === 0 ? { type: 'any' } : { type: 'tool', name: 'get_time' };
  const req = { model: 'x', max_tokens: 64, messages: user, tools, tool_choice, temperature: 1,
    seed };
  const m = stream ? await anthropic.messages.stream(req).finalMessage()
    : await anthropic.messages.create(req);
  const uses = m.content.filter((b) => b.type === 'tool_use');
  assert.ok(uses.length >= 1, `seed ${seed}: no tool_use: ${JSON.stringify(m)}`);
  return uses.map((u) => [u.name, JSON.stringify(u.input)]);
}

async function responsesCall(seed, stream) {
  const tools = Object.entries(schemaOf).map(([name, parameters]) =>
    ({ type: 'function', name, parameters, strict: true }));
  const tool_choice = seed % 2 === 0 ? 'required' : { type: 'function', name: 'get_weather' };
  const req = { model: 'x', input: 'Weather in Paris?', tools, tool_choice, temperature: 1,
    seed, max_output_tokens: 64 };
  let output;
  let deltas = '';
  if (stream) {
    for await (const ev of await openai.responses.create({ ...req, stream: true })) {
      if (ev.type === 'response.function_call_arguments.delta') deltas += ev.delta;
      if (ev.type === 'response.completed' || ev.type === 'response.incomplete') {
        output = ev.response.output;
      }
    }
  } else {
    output = (await openai.responses.create(req)).output;
  }
  const calls = output.filter((o) => o.type === 'function_call');
  assert.ok(calls.length >= 1, `seed ${seed}: no function_call: ${JSON.stringify(output)}`);
  // Streamed argument deltas concatenate to the calls' arguments.
  if (stream) assert.equal(deltas, calls.map((c) => c.arguments).join(''));
  return calls.map((c) => [c.name, c.arguments]);
}

function forcedCallTest(api, call) {
  return [`${api}: ${RUNS} seeded forced calls at max_tokens 64 (half streamed) validate`,
    async () => {
      for (let seed = 0; seed < RUNS; seed++) {
        const calls = await call(seed, seed % 4 >= 2);
        for (const [name, args] of calls) {
          assert.ok(name in schemaOf, `seed ${seed}: unknown tool ${name}`);
          check(schemaOf[name], parse(args, `seed ${seed}`), `seed ${seed} ${name}`);
        }
      }
    }];
}

const JSON_SCHEMA = {
  type: 'object',
  properties: {
    summary: { type: 'string' },
    score: { type: 'number' },
    tags: { type: 'array', items: { type: 'string' }, minItems: 1 },
    nested: { type: 'object', properties: { ok: { type: 'boolean' }, note: { type: 'string' } },
      required: ['ok', 'note'] },
  },
  required: ['summary', 'score', 'tags', 'nested'],
  additionalProperties: false,
};

// log-softmax of row `row` of the logits file, and its top k (ties to the lower id).
function logSoftmax(logits, vocab, row) {
  const r = logits.subarray(row * vocab, (row + 1) * vocab);
  let max = -Infinity;
  for (const l of r) max = Math.max(max, l);
  let sum = 0;
  for (const l of r) sum += Math.exp(l - max);
  const z = max + Math.log(sum);
  const ids = [...r.keys()].sort((a, b) => r[b] - r[a] || a - b);
  return { lp: (id) => r[id] - z, top: (k) => ids.slice(0, k) };
}

const tests = [
  forcedCallTest('chat completions', chatCall),
  forcedCallTest('messages', messagesCall),
  forcedCallTest('responses', responsesCall),
  ['tool_choice auto: any call the model opens validates; unsupported keywords: 400 when forced, unbound objects with auto',
    async () => {
      const tools = [{ type: 'function', function: { name: 'get_weather', parameters: WEATHER } }];
      for (let seed = 0; seed < 4; seed++) {
        const r = await openai.chat.completions.create({ model: 'x', messages: user, tools,
          temperature: 1, seed, max_tokens: 48 });
        for (const c of r.choices[0].message.tool_calls ?? []) {
          check(WEATHER, parse(c.function.arguments, `auto ${seed}`), `auto ${seed}`);
        }
      }
      const bad = [{ type: 'function', function: { name: 'f',
        parameters: { type: 'object', properties: { a: { type: 'string', pattern: 'x' } } } } }];
      await assert.rejects(openai.chat.completions.create({ model: 'x', messages: user,
        tools: bad, tool_choice: 'required', max_tokens: 4 }),
      (e) => e instanceof OpenAI.BadRequestError && /'pattern'/.test(e.message) &&
        e.param === 'tools');
      const anyOfTools = [{ name: 'f',
        input_schema: { type: 'object', properties: { a: { anyOf: [] } } } }];
      await assert.rejects(anthropic.messages.create({ model: 'x', max_tokens: 4, messages: user,
        tools: anyOfTools, tool_choice: { type: 'any' },
      }), (e) => e instanceof Anthropic.BadRequestError && /'anyOf'/.test(e.message));
      // With auto the same tool list is served (its calls are objects, not schema-bound), so
      // agents whose tools use keywords the automaton lacks keep working.
      const free = await anthropic.messages.create({ model: 'x', max_tokens: 24, messages: user,
        tools: anyOfTools });
      for (const b of free.content) {
        if (b.type === 'tool_use') assert.equal(typeof b.input, 'object', 'auto call input');
      }
    }],
  ['json_schema at temperature 1, max_completion_tokens 96: 50 seeded answers validate',
    async () => {
      const format = { type: 'json_schema',
        json_schema: { name: 'r', strict: true, schema: JSON_SCHEMA } };
      let cut = 0;
      for (let seed = 0; seed < 50; seed++) {
        const r = await openai.chat.completions.create({ model: 'x', temperature: 1, seed,
          messages: [{ role: 'user', content: 'Review this as JSON.' }], response_format: format,
          max_completion_tokens: 96 });
        const c = r.choices[0];
        check(JSON_SCHEMA, parse(c.message.content, `seed ${seed}`), `seed ${seed}`);
        assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
        if (c.finish_reason === 'length') cut++;
      }
      console.log(`# ${cut} of 50 closed by the budget (finish_reason length)`);
    }],
  ['logprobs: prompt and greedy continuation equal log-softmax of deltafin logits', async () => {
    const prompt = [17, 250, 3, 99, 400, 12, 7];
    const k = 5;
    const req = { model: 'x', prompt, max_tokens: 8, temperature: 0, logprobs: k, echo: true };
    const whole = await openai.completions.create(req);
    const lp = whole.choices[0].logprobs;
    // The greedy continuation's ids, then every position's logits, from the CLI.
    const ids = `${workDir}/greedy.json`;
    execFileSync(bin, ['run', '--model', modelDir, '--prompt-ids', prompt.join(','),
      '--max-new', '8', '--speculate', 'off', '--ids-out', ids, '--ignore-eos'],
    { stdio: ['ignore', 'ignore', 'pipe'] });
    const gen = JSON.parse(readFileSync(ids, 'utf8'));
    const all = [...prompt, ...gen];
    const out = `${workDir}/logits.bin`;
    execFileSync(bin, ['logits', '--model', modelDir, '--tokens', all.join(','), '--out', out],
      { stdio: ['ignore', 'ignore', 'pipe'] });
    const buf = readFileSync(out);
    const logits = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
    const vocab = logits.length / all.length;
    // The server's tokens are the prompt (echo) then its own greedy continuation.
    assert.equal(lp.token_logprobs.length, prompt.length + whole.usage.completion_tokens);
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    const n = Math.min(lp.token_logprobs.length, all.length);
    for (let i = 1; i < n; i++) {
      const ref = logSoftmax(logits, vocab, i - 1);
      assert.ok(Math.abs(lp.token_logprobs[i] - ref.lp(all[i])) <= 1e-5,
        `position ${i}: ${lp.token_logprobs[i]} vs ${ref.lp(all[i])}`);
      const top = Object.values(lp.top_logprobs[i]);
      const want = ref.top(k).map((id) => ref.lp(id));
      assert.equal(top.length, want.length, `position ${i}`);
      top.forEach((v, j) => assert.ok(Math.abs(v - want[j]) <= 1e-5,
        `position ${i} top ${j}: ${v} vs ${want[j]}`));
    }
    // Streamed: the same values (echo first, then the continuation's chunks).
    const streamed = [];
    for await (const c of await openai.completions.create({ ...req, stream: true })) {
      streamed.push(...(c.choices[0]?.logprobs?.token_logprobs ?? []));
    }
    assert.deepEqual(streamed, lp.token_logprobs);
    // Without echo (and so with the session reused), the continuation's values are unchanged.
    const again = await openai.completions.create({ ...req, echo: false });
    assert.deepEqual(again.choices[0].logprobs.token_logprobs,
      lp.token_logprobs.slice(prompt.length));
  }],
  ['logprobs: chat and Responses shapes, streamed equal to whole', async () => {
    const req = { model: 'x', messages: user, max_tokens: 6, temperature: 0, logprobs: true,
      top_logprobs: 3 };
    const whole = await openai.chat.completions.create(req);
    const content = whole.choices[0].logprobs.content;
    assert.equal(content.length, whole.usage.completion_tokens);
    for (const t of content) {
      assert.equal(typeof t.token, 'string');
      assert.ok(Array.isArray(t.bytes));
      assert.equal(t.top_logprobs.length, 3);
      // Greedy without penalties: the chosen token is the most likely one.
      assert.equal(t.logprob, t.top_logprobs[0].logprob);
      assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
    }
    const streamed = [];
    for await (const c of await openai.chat.completions.create({ ...req, stream: true })) {
      streamed.push(...(c.choices[0]?.logprobs?.content ?? []));
    }
    assert.deepEqual(streamed, content);
    const rreq = { model: 'x', input: 'Hello there', max_output_tokens: 6, temperature: 0,
      reasoning: { effort: 'none' }, include: ['message.output_text.logprobs'], top_logprobs: 2 };
    const r = await openai.responses.create(rreq);
    const msg = r.output.find((o) => o.type === 'message');
    if (msg) {
      const part = msg.content[0];
      assert.ok(part.logprobs.length >= 1);
      for (const t of part.logprobs) {
        assert.equal(t.top_logprobs.length, 2);
        assert.equal(typeof t.logprob, 'number');
      }
      let deltas = [];
      for await (const ev of await openai.responses.create({ ...rreq, stream: true })) {
        if (ev.type === 'response.output_text.delta') deltas = deltas.concat(ev.logprobs);
      }
      assert.deepEqual(deltas, part.logprobs);
    }
    await assert.rejects(openai.chat.completions.create({ ...req, logprobs: false }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'top_logprobs');
  }],
  ['penalties: accepted, deterministic with a seed, and acting on greedy answers', async () => {
    const base = { model: 'x', prompt: 'the the the the', max_tokens: 24, temperature: 0,
      logprobs: 0 };
    const plain = await openai.completions.create(base);
    const pen = { ...base, frequency_penalty: 1.5, presence_penalty: 1, repeat_penalty: 1.3 };
    const a = await openai.completions.create(pen);
    const b = await openai.completions.create(pen);
    assert.equal(a.choices[0].text, b.choices[0].text);
    assert.notEqual(a.choices[0].text, plain.choices[0].text);
    // The logprobs stay the raw model's: the penalised greedy choice need not be the top one.
    const seeded = { ...pen, temperature: 1, seed: 11 };
    const s1 = await openai.completions.create(seeded);
    const s2 = await openai.completions.create(seeded);
    assert.equal(s1.choices[0].text, s2.choices[0].text);
    await assert.rejects(openai.chat.completions.create({ model: 'x', messages: user,
      frequency_penalty: 2.5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'frequency_penalty');
  }],
];

// ONLY=regex runs the tests whose names match (when debugging one part).
const only = process.env.ONLY ? new RegExp(process.env.ONLY) : null;
await runTests(only ? tests.filter(([name]) => only.test(name)) : tests);

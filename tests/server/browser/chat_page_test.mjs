// The web chat page in a real browser (ctest server_browser, via run_browser_test.sh): Debian's
// chromium, headless, driven over the DevTools protocol (chrome-remote-interface), against
// `deltafin serve` with the tiny model on 127.0.0.1.
//
//   node chat_page_test.mjs SERVER_ROOT_URL DEVTOOLS_PORT OUT_DIR SERVER_LOG AUTH_ROOT_URL KEY
//
// Checks: the page loads from GET / and asks for nothing outside the server; a message streams
// into the DOM (several updates, not one) and matches the same request made without the page;
// the thinking block collapses; the timing panel has one row per token and a summary; Stop ends
// the request, the server counts and logs the cancellation, and the next message works; no
// script errors or CSP violations. On a server with --api-key (AUTH_ROOT_URL), the page asks for
// the key, and chats once it is entered in Settings. Writes OUT_DIR/chat_page.png
// (Page.captureScreenshot).
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import CDP from 'chrome-remote-interface';

const [root, devtoolsPort, outDir, serverLog, authRoot, apiKey] = process.argv.slice(2);
const deadline = Date.now() + 55_000;  // the whole test stays under a minute

const client = await CDP({ host: '127.0.0.1', port: Number(devtoolsPort) });
const { Page, Runtime, Network, Log, Emulation } = client;
const urls = [];
const problems = [];
Network.requestWillBeSent(({ request }) => urls.push(request.url));
Runtime.exceptionThrown(({ exceptionDetails: d }) =>
  problems.push('exception: ' + (d.exception?.description ?? d.text)));
Runtime.consoleAPICalled(({ type, args }) => {
  if (type === 'error') problems.push('console.error: ' + args.map((a) => a.value).join(' '));
});
Log.entryAdded(({ entry }) => {
  if (entry.level === 'error') problems.push('log: ' + entry.text);
});

async function js(expression) {
  const r = await Runtime.evaluate({ expression, returnByValue: true, awaitPromise: true });
  if (r.exceptionDetails) throw new Error(`${expression}: ${r.exceptionDetails.text}`);
  return r.result.value;
}

async function waitFor(expression, what, ms = 20_000) {
  const until = Math.min(Date.now() + ms, deadline);
  for (;;) {
    const v = await js(expression);
    if (v) return v;
    if (Date.now() > until) throw new Error('timed out waiting for ' + what);
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function metric(name) {
  const text = await (await fetch(root + '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  assert.ok(line, 'no metric ' + name);
  return Number(line.split(' ')[1]);
}

// Types into the prompt box and presses Send, as a user would.
async function sendMessage(text, maxTokens) {
  await js(`document.getElementById('max-tokens').value = ${JSON.stringify(String(maxTokens))};
            document.getElementById('prompt').value = ${JSON.stringify(text)};
            document.getElementById('send').click(); true`);
  await waitFor(`document.body.dataset.state === 'busy'`, 'the request to start', 5_000);
}

const lastAnswer = `document.querySelector('#messages .msg.assistant:last-of-type')`;

try {
  await Promise.all([Page.enable(), Runtime.enable(), Network.enable(), Log.enable()]);
  await Emulation.setDeviceMetricsOverride({
    width: 1280, height: 800, deviceScaleFactor: 1, mobile: false });

  // ---- the page loads, self-contained ----
  await Page.navigate({ url: root + '/' });
  await Page.loadEventFired();
  assert.equal(await js('document.title'), 'Deltafin chat');
  const modelLine = await waitFor(
    `(t => t.includes('context') && t)(document.getElementById('model').textContent)`,
    'the model name');
  console.log(`ok - page loaded from ${root}/ (${modelLine})`);

  // ---- a streamed reply appears in the DOM ----
  // Count how often the answer's text changes while it streams.
  await js(`window.updates = 0;
            new MutationObserver(() => window.updates++).observe(
              document.getElementById('messages'),
              { childList: true, subtree: true, characterData: true }); true`);
  const question = 'Hello! What is the capital of France?';
  const maxTokens = 24;
  await sendMessage(question, maxTokens);
  await waitFor(`${lastAnswer}?.dataset.done`, 'the answer to finish');
  const shown = await js(`(() => { const a = ${lastAnswer};
      return { content: a.querySelector('.content').textContent,
               reasoning: a.querySelector('.reasoning').textContent,
               thinkingHidden: a.querySelector('details.thinking').hidden,
               thinkingOpen: a.querySelector('details.thinking').open,
               done: a.dataset.done, note: a.querySelector('.note').textContent,
               rows: document.querySelectorAll('#token-rows .row').length,
               firstRow: document.querySelector('#token-rows .row .label')?.textContent,
               summary: document.getElementById('summary').textContent,
               rowsWithIo: Array.from(document.querySelectorAll('#token-rows .row .io'))
                 .filter((e) => parseFloat(e.style.width) > 0).length,
               updates: window.updates, state: document.body.dataset.state }; })()`);
  // The same request without the page (greedy, so the same tokens).
  const direct = await (await fetch(root + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: question }],
                           max_tokens: maxTokens }),
  })).json();
  const msg = direct.choices[0].message;
  assert.equal(shown.done, 'finished', shown.note);
  assert.equal(shown.state, 'idle');
  assert.ok(shown.content.length + shown.reasoning.length > 0, 'an empty answer');
  assert.equal(shown.content, msg.content ?? '', 'the page shows the content the server made');
  assert.equal(shown.reasoning, msg.reasoning_content ?? '', 'and the reasoning');
  assert.equal(direct.usage.completion_tokens, maxTokens);
  assert.ok(direct.timings && direct.timings.predicted_n === maxTokens, 'timings in the response');
  assert.ok(shown.updates > 3, `the answer arrived in ${shown.updates} DOM updates: not streamed`);
  assert.equal(shown.rows, maxTokens, 'one timing row per token');
  assert.match(shown.firstRow, /^prefill \d+$/);
  assert.match(shown.summary, new RegExp(`generated${maxTokens} tokens`));
  assert.match(shown.summary, /decode[\d.]+ ms\/token/);
  assert.match(shown.summary, /I\/O wait[\d.]+ % of engine time/);
  // Streamed experts (run_browser_test.sh): reads happened and the bars show their wait.
  assert.ok(Number(/experts read([\d.]+) MiB/.exec(shown.summary)[1]) > 0, shown.summary);
  assert.ok(shown.rowsWithIo > 0, 'no bar shows I/O wait');
  // The screenshot shows the page as the answer left it (before the toggle below).
  const shot = await Page.captureScreenshot({ format: 'png' });
  writeFileSync(`${outDir}/chat_page.png`, Buffer.from(shot.data, 'base64'));
  if (shown.reasoning) {
    // Thinking sits in a collapsible block: collapsed once the answer proper starts (or left
    // open when the whole reply was thinking); a click on its summary toggles it.
    assert.equal(shown.thinkingHidden, false);
    assert.equal(shown.thinkingOpen, shown.content.length === 0);
    const toggled = await js(`(() => { const d = ${lastAnswer}.querySelector('details.thinking');
        d.querySelector('summary').click(); return d.open; })()`);
    assert.equal(toggled, !shown.thinkingOpen, 'the thinking block toggles');
  }
  console.log(`ok - streamed reply in the DOM: ${shown.content.length} content + ` +
              `${shown.reasoning.length} reasoning chars in ${shown.updates} updates, equal to ` +
              `the same request without the page; ${shown.rows} token rows (${shown.rowsWithIo} ` +
              `with I/O wait); screenshot ` +
              `${outDir}/chat_page.png`);

  // ---- Stop cancels the work on the server ----
  const cancelledBefore = await metric('deltafin_requests_cancelled_total');
  await sendMessage('Tell me a very long story.', 3000);
  await waitFor(`document.querySelectorAll('#token-rows .row').length >= 5`, 'tokens to stream');
  await js(`document.getElementById('stop').click(); true`);
  await waitFor(`${lastAnswer}?.dataset.done === 'stopped'`, 'the page to show it stopped', 5_000);
  const rowsAtStop = await js(`document.querySelectorAll('#token-rows .row').length`);
  assert.ok(rowsAtStop < 3000, 'the answer finished before Stop');
  const t0 = Date.now();
  while (await metric('deltafin_requests_cancelled_total') < cancelledBefore + 1) {
    assert.ok(Date.now() - t0 < 5_000, 'Stop did not cancel the request on the server');
    await new Promise((r) => setTimeout(r, 50));
  }
  while (await metric('deltafin_requests_running') !== 0) {
    assert.ok(Date.now() - t0 < 5_000, 'the engine is still busy after Stop');
    await new Promise((r) => setTimeout(r, 50));
  }
  const cancelledLines = readFileSync(serverLog, 'utf8').split('\n')
    .filter((l) => / POST \/v1\/chat\/completions 499 .* cancelled$/.test(l));
  assert.equal(cancelledLines.length, 1, 'the server log shows the cancellation');
  console.log(`ok - Stop after ${rowsAtStop} tokens: cancelled on the server in ` +
              `${Date.now() - t0} ms; log: ${cancelledLines[0]}`);

  // ---- the next message works ----
  await sendMessage('Thanks. One more question?', 8);
  await waitFor(`${lastAnswer}?.dataset.done`, 'the next answer');
  assert.equal(await js(`${lastAnswer}.dataset.done`), 'finished');
  assert.equal(await js(`document.querySelectorAll('#token-rows .row').length`), 8);
  assert.equal(await js(`document.querySelectorAll('#messages .msg').length`), 6);
  console.log('ok - the next message after Stop is answered');

  // ---- nothing from elsewhere, no errors ----
  const foreign = urls.filter((u) => !u.startsWith(root + '/'));
  assert.deepEqual(foreign, [], 'the page loaded something from outside the server');
  assert.deepEqual(problems, [], 'script errors or CSP violations');
  console.log(`ok - ${urls.length} requests, all to ${root}; no script errors`);

  // ---- a server with --api-key: the page loads, asks for the key, then works ----
  await Page.navigate({ url: authRoot + '/' });
  await Page.loadEventFired();
  await waitFor(`document.getElementById('model').textContent.includes('API key')`,
                'the page to ask for the API key', 10_000);
  await js(`(() => { const k = document.getElementById('api-key');
              k.value = ${JSON.stringify(apiKey)};
              k.dispatchEvent(new Event('change')); return true; })()`);
  await waitFor(`document.getElementById('model').textContent.includes('context')`,
                'the models list with the key', 10_000);
  await js(`document.getElementById('effort').value = 'none'; true`);
  await sendMessage('Hi', 4);
  await waitFor(`${lastAnswer}?.dataset.done`, 'the answer with the key');
  const keyed = await js(`({ done: ${lastAnswer}.dataset.done,
      content: ${lastAnswer}.querySelector('.content').textContent,
      rows: document.querySelectorAll('#token-rows .row').length })`);
  assert.equal(keyed.done, 'finished');
  assert.ok(keyed.content.length > 0, 'thinking off: the reply is content');
  assert.equal(keyed.rows, 4);
  console.log('ok - with --api-key: the page asks for the key, then chats ' +
              '(thinking off: the reply is content)');
  console.log('all passed');
} finally {
  await client.Browser.close().catch(() => {});
  await client.close().catch(() => {});
}

// The chat page (server/webui) in a real headless browser: Debian's chromium
// driven by playwright-core, against a running `opal serve --metrics`.
// Run by tests/server/test_server_webui.cpp (ctest label `server`):
//   OPAL_URL=http://127.0.0.1:PORT/ OPAL_MODEL=stories OPAL_SCREENSHOT_DIR=DIR [CHROMIUM=/usr/bin/chromium] \
//     node webui_browser.mjs
// Checks, in order: the model's name is shown; a message gets an answer that
// finishes with a tokens/s line, equal to the server's own greedy answer for
// the same request (so the system prompt and the sampling settings reach it);
// a long generation streams (its text grows while the page says generating);
// Stop ends it, the text stops growing and
// /metrics shows no request processing and one more cancelled; the conversation
// survives a reload (localStorage); Markdown renders (code, lists, headings,
// links) and HTML in a reply stays text; New chat clears. Screenshots go to
// OPAL_SCREENSHOT_DIR (their paths are printed). Exits 1 naming the failed check.
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';

const url = process.env.OPAL_URL;
const model = process.env.OPAL_MODEL;
const shots = process.env.OPAL_SCREENSHOT_DIR;
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';
if (!url || !model || !shots) {
  console.error('webui_browser: set OPAL_URL, OPAL_MODEL and OPAL_SCREENSHOT_DIR');
  process.exit(2);
}
if (!existsSync(chromiumPath)) {
  console.error(`webui_browser: FAIL: no browser at ${chromiumPath} (apt-get install chromium; scripts/setup.sh does)`);
  process.exit(1);
}
let chromium;
try {
  ({ chromium } = await import('playwright-core'));
} catch (e) {
  console.error(`webui_browser: FAIL: the npm package playwright-core is missing (run npm ci in tests/server/node): ${e.message}`);
  process.exit(1);
}
mkdirSync(shots, { recursive: true });

function check(cond, what) {
  if (!cond) throw new Error(what);
  console.log(`ok: ${what.split(':')[0]}`);
}

async function metrics() {
  const text = await (await fetch(new URL('metrics', url))).text();
  const value = (name) => {
    const m = text.match(new RegExp(`^${name.replace(/[:]/g, '\\$&')} ([0-9.e+-]+)$`, 'm'));
    return m ? Number(m[1]) : NaN;
  };
  return { processing: value('llamacpp:requests_processing'), cancelled: value('opal:requests_cancelled_total') };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const norm = (s) => s.replace(/\s+/g, ' ').trim();

const browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
let failed = false;
try {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2 });
  const page = await context.newPage();
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => {
    if (m.type() === 'error') pageErrors.push(m.text());
  });

  // ---- the page and the model's name ----
  await page.goto(url);
  await page.waitForFunction(() => document.body.dataset.state === 'idle');
  await page.waitForFunction(() => document.getElementById('model-name').textContent !== 'loading…');
  const shown = await page.textContent('#model-name');
  check(shown === model, `model name: the header shows '${shown}', /v1/models says '${model}'`);

  // ---- settings: system prompt, greedy, 40 tokens ----
  await page.click('#settings summary');
  await page.fill('#s-system', 'You are a storyteller.');
  await page.fill('#s-temperature', '0');
  await page.fill('#s-top_k', '1');
  await page.fill('#s-max_tokens', '40');
  await page.fill('#s-seed', '7');
  await page.click('#settings summary');  // close it

  // ---- a streamed answer that grows, then finishes ----
  // Record the reply's length at every change, inside the page.
  await page.evaluate(() => {
    window.__lengths = [];
    new MutationObserver(() => {
      const b = document.querySelector('#messages .msg.assistant:last-child .body');
      if (b) window.__lengths.push(b.textContent.length);
    }).observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
  });
  await page.fill('#input', 'Once upon a time');
  await page.press('#input', 'Enter');
  await page.waitForFunction(() => document.body.dataset.state === 'idle' &&
                             document.querySelector('#messages .msg.assistant:last-child .stats')?.textContent,
                             null, { timeout: 60000 });
  const lengths = await page.evaluate(() => window.__lengths);
  const distinct = new Set(lengths.filter((n) => n > 0)).size;
  const reply = await page.textContent('#messages .msg.assistant:last-child .body');
  const stats = await page.textContent('#messages .msg.assistant:last-child .stats');
  check(reply.trim().length > 0, 'answer: the reply is empty');
  console.log(`(the short reply was painted at ${distinct} distinct length(s); growth is checked on the long one)`);
  check(/^\d+ tokens? · [\d.]+ tokens\/s/.test(stats), `tokens/s: the reply's stats line is '${stats}'`);
  // The same request to the server directly: the page sent the system prompt and settings.
  const direct = await (await fetch(new URL('v1/chat/completions', url), {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      messages: [{ role: 'system', content: 'You are a storyteller.' }, { role: 'user', content: 'Once upon a time' }],
      temperature: 0, top_k: 1, max_tokens: 40, seed: 7,
      cache_prompt: false,  // the whole prompt in one batch, as the page's first request had it
    }),
  })).json();
  const expected = direct.choices[0].message.content;
  check(norm(reply) === norm(expected), `settings reach the server: the page shows '${norm(reply)}', ` +
        `the same request gives '${norm(expected)}'`);
  const n = Number(stats.match(/^(\d+)/)[1]);
  check(n === direct.usage.completion_tokens, `token count: the page says ${n}, usage says ${direct.usage.completion_tokens}`);

  // ---- Stop during a long generation ----
  const before = await metrics();
  await page.click('#settings summary');
  await page.fill('#s-max_tokens', '30000');
  await page.fill('#s-extra', '{"ignore_eos": true}');
  await page.click('#settings summary');
  await page.fill('#input', 'Tell me a very long story.');
  await page.press('#input', 'Enter');
  await page.waitForFunction(() => {
    const b = document.querySelector('#messages .msg.assistant:last-child .body');
    return b && b.textContent.length > 200;
  }, null, { timeout: 30000 });
  // Still generating, and still growing: the reply is streamed as it is generated.
  const grown = await page.evaluate(() => document.querySelector('#messages .msg.assistant:last-child .body').textContent.length);
  await page.waitForFunction((n) => {
    const b = document.querySelector('#messages .msg.assistant:last-child .body');
    return document.body.dataset.state === 'generating' && b.textContent.length > n + 100;
  }, grown, { timeout: 30000 });
  console.log(`ok: streaming: the reply grew past ${grown} characters while generating`);
  const busy = await metrics();
  check(busy.processing === 1, `a request is processing during the long generation: requests_processing ${busy.processing}`);
  check(await page.isVisible('#stop'), 'stop button: visible while generating');
  await page.click('#stop');
  await page.waitForFunction(() => document.body.dataset.state === 'idle', null, { timeout: 10000 });
  const stopped = await page.textContent('#messages .msg.assistant:last-child .body');
  await sleep(500);
  const later = await page.textContent('#messages .msg.assistant:last-child .body');
  check(later === stopped, `stop: the text grew after Stop (${stopped.length} -> ${later.length} characters)`);
  const stopStats = await page.textContent('#messages .msg.assistant:last-child .stats');
  check(/stopped$/.test(stopStats), `stop: the stats line says '${stopStats}', expected it to end in 'stopped'`);
  let after = await metrics();
  for (let i = 0; i < 50 && (after.processing !== 0 || after.cancelled < before.cancelled + 1); ++i) {
    await sleep(100);
    after = await metrics();
  }
  check(after.processing === 0, `stop: the server still processes ${after.processing} request(s) after Stop`);
  check(after.cancelled === before.cancelled + 1,
        `stop: opal:requests_cancelled_total went ${before.cancelled} -> ${after.cancelled}, expected +1`);
  check(await page.isVisible('#send'), 'send button: back after Stop');

  // ---- the conversation survives a reload ----
  await page.reload();
  await page.waitForFunction(() => document.body.dataset.state === 'idle');
  const kept = await page.$$eval('#messages .msg', (ms) => ms.map((m) => m.className));
  check(kept.length === 4, `reload: ${kept.length} messages after a reload, expected 4 (two turns)`);
  const chatShot = join(shots, 'webui-chat.png');
  await page.screenshot({ path: chatShot });
  console.log(`screenshot: ${chatShot}`);

  // ---- Markdown, and HTML in a reply stays text ----
  const md = [
    '## Heading two',
    'Some **bold**, *italic*, `inline code` and a [link](https://example.com/a_b).',
    '',
    '- first item',
    '- second item',
    '  1. nested one',
    '',
    '```js',
    'const x = "<b>not bold</b>";',
    '```',
    '',
    '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script> [bad](javascript:window.__xss=3)',
  ].join('\n');
  await page.evaluate((content) => {
    localStorage.setItem('opal.chat.v1', JSON.stringify([
      { role: 'user', content: 'Show me <i>markdown</i>' },
      { role: 'assistant', content, stats: '42 tokens · 123.4 tokens/s' },
    ]));
  }, md);
  await page.setViewportSize({ width: 900, height: 760 });
  await page.reload();
  await page.waitForFunction(() => document.body.dataset.state === 'idle');
  const dom = await page.evaluate(() => {
    const b = document.querySelector('#messages .msg.assistant .body');
    const q = (s) => b.querySelector(s);
    return {
      h2: q('h2')?.textContent,
      strong: q('strong')?.textContent,
      em: q('em')?.textContent,
      code: q('p code')?.textContent,
      link: q('a')?.getAttribute('href'),
      items: [...b.querySelectorAll('ul > li')].length,
      nested: q('ul ol li')?.textContent,
      pre: q('pre code.language-js')?.textContent,
      elements: [...b.querySelectorAll('img, script, b, i')].length,
      anchors: b.querySelectorAll('a').length,
      user: document.querySelector('#messages .msg.user').textContent,
      xss: window.__xss,
    };
  });
  check(dom.h2 === 'Heading two', `markdown heading: ${dom.h2}`);
  check(dom.strong === 'bold' && dom.em === 'italic' && dom.code === 'inline code',
        `markdown inline: strong ${dom.strong}, em ${dom.em}, code ${dom.code}`);
  check(dom.link === 'https://example.com/a_b', `markdown link: href ${dom.link}`);
  check(dom.items === 2 && dom.nested === 'nested one', `markdown lists: ${dom.items} items, nested '${dom.nested}'`);
  check(dom.pre === 'const x = "<b>not bold</b>";', `markdown code block: '${dom.pre}'`);
  check(dom.elements === 0 && dom.xss === undefined && dom.anchors === 1,
        `escaped HTML: ${dom.elements} injected elements, ${dom.anchors} links, __xss ${dom.xss}`);
  check(dom.user === 'Show me <i>markdown</i>', `user text shown as text: '${dom.user}'`);
  const mdShot = join(shots, 'webui-markdown.png');
  await page.screenshot({ path: mdShot });
  console.log(`screenshot: ${mdShot}`);

  // ---- New chat clears ----
  await page.click('#new-chat');
  const left = await page.$$eval('#messages .msg', (ms) => ms.length);
  const stored = await page.evaluate(() => JSON.parse(localStorage.getItem('opal.chat.v1')));
  check(left === 0 && stored.length === 0, `new chat: ${left} messages shown, ${stored.length} stored`);
  check(await page.isVisible('#empty'), 'new chat: the empty-conversation hint is shown');
  check(pageErrors.length === 0, `page errors: ${pageErrors.join(' | ')}`);
  console.log('webui browser: all checks passed');
} catch (e) {
  failed = true;
  console.error(`webui_browser: FAIL: ${e.message}`);
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);

// The playground (web/, served at /) in a real browser: Debian's chromium, headless, driven by
// playwright-core. Checks what a user does: open the page (its CSP), pick a model, send a
// prompt and see the reply stream in with TTFT and tok/s, stop a long reply mid-way (the
// server frees its KV blocks), switch models, token probabilities on hover, JSON mode,
// completions mode, conversations kept across reloads, markdown that cannot inject markup, and
// a server that requires API keys. Env: TF_URL (two models: TF_FAST and TF_SLOW), TF_KEY_URL
// and TF_KEY (a key-protected server), TF_ADMIN_KEY unused there, CHROMIUM, TF_SCREENSHOT.
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const url = process.env.TF_URL;
const fast = process.env.TF_FAST;
const slow = process.env.TF_SLOW;
const step = (name) => console.log("- " + name);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});

async function stats(model) {
  const r = await fetch(url + "/v1/admin/stats");
  const s = await r.json();
  return s.models[model];
}

// Polls cond (an async predicate) until it holds; fails with what after the overall deadline.
async function until(cond, what, ms = 60000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 20));
  }
}

try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  const chatBodies = [];
  page.on("request", (r) => {
    if (r.url().endsWith("/v1/chat/completions")) chatBodies.push(JSON.parse(r.postData()));
  });

  step("the page and its Content-Security-Policy");
  const resp = await page.goto(url + "/");
  assert.equal(resp.status(), 200);
  const csp = resp.headers()["content-security-policy"];
  assert.match(csp, /default-src 'none'/);
  assert.match(csp, /script-src 'self'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  assert.equal(resp.headers()["x-content-type-options"], "nosniff");
  await until(async () => (await page.locator("#model option").count()) >= 2, "the model list");
  const ids = await page.locator("#model option").evaluateAll((os) => os.map((o) => o.value));
  assert.ok(ids.includes(fast) && ids.includes(slow), ids.join(","));

  step("a chat reply streams in, with TTFT and tok/s");
  await page.selectOption("#model", fast);
  await page.fill("#max_tokens", "48");
  await page.fill("#temperature", "0");
  await page.fill("#prompt", "Once upon a time");
  await page.click("#send");
  const reply = page.locator("#messages .message.assistant").last();
  await until(async () => (await reply.getAttribute("data-finish")) !== null, "the first reply");
  assert.ok((await reply.locator(".body").innerText()).trim().length > 0);
  assert.match(await page.locator("#ttft").innerText(), /^TTFT \d+ ms$/);
  assert.match(await page.locator("#ntokens").innerText(), /^\d+ tokens?$/);
  assert.equal(chatBodies.at(-1).model, fast);
  assert.equal(chatBodies.at(-1).stream, true);
  assert.equal(chatBodies.at(-1).messages.at(-1).content, "Once upon a time");

  step("stop mid-way: the server cancels the request and frees its blocks");
  await page.selectOption("#model", slow);
  await page.fill("#max_tokens", "800");
  await page.fill("#temperature", "1");
  await page.fill("#prompt", "Tell me a very long story");
  await page.click("#send");
  const long = page.locator("#messages .message").last();
  await until(async () => (await long.locator(".body").innerText()).length > 20, "streamed text");
  assert.equal(await long.getAttribute("class"), "message assistant");
  await until(async () => (await stats(slow)).kv_blocks_used > 0, "the slow model's blocks in use");
  assert.equal(await page.locator("#stop").isEnabled(), true);
  await page.click("#stop");
  await until(async () => (await long.getAttribute("data-finish")) === "stopped", "the stopped reply");
  await until(async () => {
    const s = await stats(slow);
    return s.kv_blocks_used === 0 && s.running === 0 && s.waiting === 0;
  }, "the slow model's blocks freed");
  assert.equal(chatBodies.at(-1).model, slow);
  const shown = await long.locator(".body").innerText();
  assert.ok(shown.length > 20);

  // The stopped reply stays in the conversation (the next turn would send it as context).
  const kept = await page.evaluate(() => JSON.parse(localStorage.getItem("tokenflow.conversations"))[0].messages);
  assert.equal(kept.length, 4);
  assert.equal(kept[3].role, "assistant");
  // The page renders it as HTML does: runs of white space (a sampled "\r" among them) as one.
  const collapse = (t) => t.replace(/\s+/g, " ").trim();
  assert.equal(collapse(kept[3].content), collapse(shown));

  step("switch models back");
  // A new conversation: how long the stopped reply grew depends on when the stop landed, and
  // the turns below must not depend on that (on a loaded machine it filled the fast model's
  // context).
  await page.click("#new-chat");
  await until(async () => (await page.locator("#messages .message").count()) === 0, "an empty conversation");
  await page.selectOption("#model", fast);
  await page.fill("#max_tokens", "16");
  await page.fill("#prompt", "The cat");
  await page.click("#send");
  await until(async () => (await page.locator("#messages .message.assistant").last().getAttribute("data-finish")) !== null, "the reply");
  assert.equal(await page.locator("#messages .message.error").count(), 0);
  assert.equal(chatBodies.at(-1).model, fast);
  assert.equal(chatBodies.at(-1).messages.length, 1);  // the new conversation's first turn

  step("token probabilities on hover");
  await page.check("#logprobs");
  await page.fill("#prompt", "Lily");
  await page.click("#send");
  await until(async () => (await page.locator("#messages .message.assistant").last().getAttribute("data-finish")) !== null, "the reply");
  assert.equal(chatBodies.at(-1).logprobs, true);
  const tok = page.locator("#messages .message.assistant").last().locator(".tok").first();
  await tok.hover();
  await until(async () => page.locator("#tooltip").isVisible(), "the tooltip");
  const rows = await page.locator("#tooltip tr").count();
  assert.ok(rows >= 2, "top alternatives listed");
  assert.match(await page.locator("#tooltip").innerText(), /%/);
  if (process.env.TF_SCREENSHOT) await page.screenshot({ path: process.env.TF_SCREENSHOT });
  await page.uncheck("#logprobs");

  step("JSON mode");
  await page.selectOption("#format", "json_object");
  await page.fill("#max_tokens", "60");
  await page.fill("#prompt", "Give me JSON");
  await page.click("#send");
  const json = page.locator("#messages .message.assistant").last();
  await until(async () => (await json.getAttribute("data-finish")) !== null, "the JSON reply");
  assert.deepEqual(chatBodies.at(-1).response_format, { type: "json_object" });
  const text = await json.locator(".body").innerText();
  if ((await json.getAttribute("data-finish")) === "stop") {
    const v = JSON.parse(text);
    assert.equal(typeof v, "object");
  } else {
    assert.match(text.trim(), /^\{/);
  }
  await page.selectOption("#format", "text");

  step("completions mode");
  await page.check("#mode-completion");
  assert.equal(await page.locator("#completion-view").isVisible(), true);
  await page.fill("#completion-prompt", "Once upon a time, there was");
  await page.fill("#max_tokens", "20");
  await page.click("#send");
  await until(async () => (await page.locator("#completion-output").getAttribute("data-finish")) === "done", "the completion");
  assert.ok((await page.locator("#completion-output").innerText()).trim().length > 0);
  await page.check("#mode-chat");

  step("conversations are kept across reloads");
  const titles = await page.locator("#conversation-list button.open").allInnerTexts();
  await page.reload();
  await until(async () => (await page.locator("#model option").count()) >= 2, "the model list");
  assert.deepEqual(await page.locator("#conversation-list button.open").allInnerTexts(), titles);
  assert.ok(titles.length >= 2, "the first conversation and the new one");
  assert.ok((await page.locator("#messages .message.assistant").count()) >= 3);  // the new one's replies
  assert.equal(await page.inputValue("#model"), fast);  // the settings are kept too

  step("markdown cannot inject markup");
  await page.evaluate(() => {
    const convs = JSON.parse(localStorage.getItem("tokenflow.conversations"));
    convs.unshift({ id: "evil", title: "evil", created: 0, messages: [
      { role: "user", content: "<img src=x onerror=alert(1)>" },
      { role: "assistant", content: "# Title\n<script>window.pwned = 1</script>\n<img src=x onerror=\"window.pwned=2\">\n**bold** and `code` and [link](javascript:alert(1))\n```js\nconsole.log('<b>hi</b>')\n```\n- one\n- two" },
    ] });
    localStorage.setItem("tokenflow.conversations", JSON.stringify(convs));
  });
  await page.reload();
  await until(async () => (await page.locator("#conversation-list li").count()) > 0, "the list");
  await page.locator("#conversation-list button.open", { hasText: "evil" }).click();
  const evil = page.locator("#messages .message.assistant").last();
  assert.equal(await page.locator("#messages img, #messages script").count(), 0);
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  assert.equal(await evil.locator("strong").innerText(), "bold");
  assert.equal(await evil.locator("pre code").innerText(), "console.log('<b>hi</b>')");
  assert.equal(await evil.locator("li").count(), 2);
  assert.equal(await evil.locator("a").count(), 0);  // only http(s) links become links
  assert.match(await evil.innerText(), /<script>window\.pwned = 1<\/script>/);
  await page.locator("#conversation-list li", { hasText: "evil" }).locator("button.delete").click();

  step("a server that requires API keys");
  const keyed = await context.newPage();
  await keyed.goto(process.env.TF_KEY_URL + "/");
  await until(async () => keyed.locator("#key-form").isVisible(), "the key field");
  assert.match(await keyed.locator("#status").innerText(), /API key/);
  await keyed.fill("#api-key", "sk-wrong");
  await keyed.click("#key-save");
  await until(async () => /refused/.test(await keyed.locator("#status").innerText()), "the refusal");
  await keyed.fill("#api-key", process.env.TF_KEY);
  await keyed.click("#key-save");
  await until(async () => (await keyed.locator("#model option").count()) >= 1, "the models behind the key");
  await keyed.fill("#max_tokens", "8");
  await keyed.fill("#prompt", "Hello");
  await keyed.click("#send");
  await until(async () => (await keyed.locator("#messages .message.assistant").last().getAttribute("data-finish")) !== null, "the keyed reply");
  assert.equal(await keyed.locator(".message.error").count(), 0);
  await keyed.close();

  assert.deepEqual(errors, []);
  console.log("all playground checks passed");
} catch (e) {
  // What the page showed, for the failure's report.
  for (const p of browser.contexts().flatMap((c) => c.pages())) {
    console.log("page", p.url(), "status:", await p.locator("#status").innerText().catch(() => "?"));
    console.log(await p.locator("#messages").innerHTML().catch(() => "?"));
  }
  throw e;
} finally {
  await browser.close();
}

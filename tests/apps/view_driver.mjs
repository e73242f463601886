// Drives the MCP App view (ui://python-runner/run.html) in a real browser, hosted the way a host does it:
// tests/e2e/protocol/test_view.py (checks) and bench/apps_view.py (timings) run it. It starts the server itself
// with the official TypeScript client (@modelcontextprotocol/client, advertising the io.modelcontextprotocol/ui
// extension), reads the view, runs real calls, and shows each result in Debian's Chromium through Playwright on
// a test host page (host.html, host.js: ext-apps' own AppBridge). It prints one JSON object per check on stdout:
// {"check": name, ...observations} or {"check": name, "error": ...}. It asserts nothing: pytest does.
//
// Usage: node view_driver.mjs '<json>' where json is
//   {"command": str, "args": [str], "env": {str: str}, "cwd": str, "chromium": str,
//    "shots": str (a directory for screenshots), "only": [str] (checks; default: all but "bench"),
//    "bench": {"rows": [int], "repeats": int}}

import { mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { build } from "esbuild";
import { chromium } from "playwright-core";

const HERE = dirname(fileURLToPath(import.meta.url));
const HOST = "http://host.test/";
const VIEW_URI = "ui://python-runner/run.html";
const EXTENSION = "io.modelcontextprotocol/ui";
const APP_MIME_TYPE = "text/html;profile=mcp-app";
const config = JSON.parse(process.argv[2]);
const only = config.only ? new Set(config.only) : null;

function emit(check, observations) {
  process.stdout.write(JSON.stringify({ check, ...observations }) + "\n");
}

async function check(name, body) {
  if (only ? !only.has(name) : name === "bench") return;
  try {
    emit(name, await body());
  } catch (error) {
    emit(name, { error: String(error?.stack ?? error) });
  }
}

const TABLE_CODE = `
import numpy as np, pandas as pd
n = 2_000_000
cities = np.array(["Ankara", "Berlin", "Cairo", "Dakar", "Lima"])
df = pd.DataFrame({
    "city": pd.Categorical.from_codes(np.arange(n) % 5, cities),
    "amount": (np.arange(n) * 37 % 1000).astype("int64"),
    "score": (np.arange(n) % 97) / 4,
    "when": pd.date_range("2026-01-01", periods=n, freq="min"),
})
df.loc[1, "score"] = np.nan
print("rows:", len(df))
df
`;
const FIGURE_CODE = `
import matplotlib.pyplot as plt
plt.plot([1, 3, 2, 4], marker="o")
plt.title("a line")
plt.show()
print("drawn")
`;
const ERROR_CODE = `
print("x" * 60_000)
import sys
print("a warning", file=sys.stderr)
raise ValueError("bad value")
`;
// A run that prints a cut mark of its own, then enough for the server to cut its stdout.
const FAKE_CUT_CODE = `
print("head\\n... [5 bytes dropped] ...\\nstill head")
print("x" * 60_000)
`;
const LINKED_CODE = `
with open("report.txt", "w") as f:
    f.write("first line of the report\\n" + "y" * 400_000)
print("written")
`;
const AGAIN_CODE = `
import os
print("pid", os.getpid())
`;
// What a run writes is text to the view, never markup: were any of it parsed, the img would ask the network for
// "x" (the request log sees it) and the script would change the title.
const HOSTILE_CODE = `
import pandas as pd
MARKUP = '<img src="x" onerror="document.title=1"><script>document.title = "pwned"</script><b>bold</b>'
print(MARKUP)
print("\\n... [5 bytes dropped] ...")  # the server's cut mark, printed by the run: no cut of the server's
open(MARKUP.replace("/", "_")[:60] + ".txt", "w").write(MARKUP)
pd.DataFrame({MARKUP: [MARKUP]})
`;
const SESSION_CODE = `
n = globals().get("n", 41) + 1
n
`;
const INFINITE_CODE = `
import numpy as np, pandas as pd
pd.DataFrame({"v": [1.0, np.inf, -np.inf, 2.0], "n": pd.array([1, None, 3, 4], dtype="Int64"),
              "t": ["delta", "inf", "constructor", "apple"]})
`;
const LONG_CODE = `print("\\n".join(f"line {i}" for i in range(60)))`;
const SHORT_CODE = `print("one line")`;

// A frame of 1,000 rows and 10 columns, the default table's size: what making its table costs a call.
const TABLE_COST_CODE = `import numpy as np, pandas as pd
pd.DataFrame(np.arange(10_000).reshape(1000, 10) * 0.5, columns=[f"c{i}" for i in range(10)])`;

function benchCode(rows) {
  return `import numpy as np, pandas as pd\nn = ${rows}\npd.DataFrame({"i": np.arange(n), "v": np.arange(n) * 0.5, "s": pd.Categorical.from_codes(np.arange(n) % 2, ["a", "b"])})`;
}

// ---- the server, through the official client ----
const client = new Client(
  { name: "python-runner-mcp view driver", version: "1.0.0" },
  { capabilities: { extensions: { [EXTENSION]: { mimeTypes: [APP_MIME_TYPE] } } } },
);
const transport = new StdioClientTransport({
  command: config.command,
  args: config.args,
  env: config.env,
  cwd: config.cwd,
  stderr: "inherit",
});
let calls = 0;
async function callTool(params) {
  calls += 1;
  return client.callTool(params, undefined, { timeout: 120_000 });
}

// ---- the browser and the test host page ----
async function hostBundle() {
  const built = await build({
    entryPoints: [join(HERE, "host.js")],
    bundle: true,
    format: "iife",
    platform: "browser",
    write: false,
    logLevel: "silent",
  });
  return built.outputFiles[0].text;
}

const requests = [];
const consoleErrors = [];

async function newPage(browser, bundle, hostHtml) {
  const page = await browser.newPage({ viewport: { width: 1100, height: 1000 } });
  page.on("request", (request) => requests.push(request.url()));
  page.on("console", (message) => {
    if (message.type() === "error") consoleErrors.push(message.text());
  });
  await page.route(`${HOST}**`, (route) => {
    const url = route.request().url();
    if (url === HOST || url === `${HOST}host.html`) {
      return route.fulfill({ contentType: "text/html", body: hostHtml });
    }
    if (url === `${HOST}host.js`) return route.fulfill({ contentType: "text/javascript", body: bundle });
    return route.fulfill({ status: 404, body: "" });
  });
  await page.exposeFunction("hostCallTool", (params) => callTool(params));
  await page.exposeFunction("hostReadResource", (params) => client.readResource(params));
  await page.goto(`${HOST}host.html`);
  return page;
}

async function show(page, view, args, result, theme = "light") {
  await page.evaluate((opened) => window.hostOpen(opened), { html: view.html, csp: view.csp, toolInput: args, theme });
  await page.evaluate((answer) => window.hostResult(answer), result);
  const frame = page.frameLocator("#view");
  await frame.locator("#status:not(.wait)").waitFor({ timeout: 10_000 });
  return frame;
}

async function texts(locator) {
  return locator.evaluateAll((elements) => elements.map((e) => e.textContent));
}

async function rowsShown(frame, cells = 3) {
  return frame.locator("#table tbody tr").evaluateAll(
    (rows, count) => rows.map((row) => [...row.children].slice(0, count).map((cell) => cell.textContent)),
    cells,
  );
}

async function shot(page, name) {
  if (!config.shots) return null;
  const path = join(config.shots, name);
  await page.locator("#view").screenshot({ path });
  return path;
}

async function run(code, extra = {}) {
  const args = { code, timeout: 60, ...extra };
  const result = await callTool({ name: "run_python", arguments: args });
  return { args, result };
}

// The view frame: when its table first shows rows, in ms since the epoch (as hostResult's).
async function firstRowsAt(page) {
  const frame = page.frames().find((f) => f !== page.mainFrame());
  return frame.evaluate(
    () =>
      new Promise((resolve) => {
        const body = document.querySelector("#table tbody");
        const seen = () => body.rows.length > 0 && !document.getElementById("table-section").hidden;
        const observer = new MutationObserver(() => {
          if (seen()) {
            observer.disconnect();
            resolve(performance.timeOrigin + performance.now());
          }
        });
        observer.observe(body, { childList: true });
        window.__firstRowsWatched = true;
      }),
  );
}

async function main() {
  if (config.shots) mkdirSync(config.shots, { recursive: true });
  await client.connect(transport);
  const browser = await chromium.launch({
    executablePath: config.chromium,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
    ],
  });
  const bundle = await hostBundle();
  const hostHtml = (await import("node:fs")).readFileSync(join(HERE, "host.html"), "utf8");
  const view = {};
  try {
    await check("declared", async () => {
      const { tools } = await client.listTools();
      const tool = tools.find((t) => t.name === "run_python");
      const read = await client.readResource({ uri: VIEW_URI });
      const [contents] = read.contents;
      view.html = contents.text;
      view.csp = contents._meta?.ui?.csp ?? {};
      const { resources } = await client.listResources();
      return {
        meta: tool._meta ?? null,
        mimeType: contents.mimeType,
        bytes: Buffer.byteLength(contents.text, "utf8"),
        csp: view.csp,
        listed: resources.map((r) => r.uri),
        extensions: client.getServerCapabilities()?.extensions ?? null,
      };
    });
    if (!view.html) return;

    await check("table", async () => {
      const { args, result } = await run(TABLE_CODE);
      const page = await newPage(browser, bundle, hostHtml);
      const frame = await show(page, view, args, result);
      await frame.locator("#table tbody tr").first().waitFor();
      const observed = {
        isError: result.isError ?? false,
        tableRows: result.structuredContent?.table?.rows?.length ?? null,
        status: await frame.locator("#status").textContent(),
        caption: await frame.locator("#table-caption").textContent(),
        headers: await texts(frame.locator("#table thead th button span:first-child")),
        firstRows: await rowsShown(frame, 4),
        page: await frame.locator("#page").textContent(),
        stdout: await frame.locator("#stdout").textContent(),
        missing: await frame.locator("#table tbody tr:nth-child(2) td:nth-child(3)").textContent(),
      };
      observed.shotLight = await shot(page, "table-light.png");
      const amount = frame.locator("#table thead th:nth-child(2) button");
      await amount.click();
      observed.ascending = { sort: await frame.locator("#table thead th:nth-child(2)").getAttribute("aria-sort"), rows: await rowsShown(frame) };
      await amount.click();
      observed.descending = { sort: await frame.locator("#table thead th:nth-child(2)").getAttribute("aria-sort"), rows: await rowsShown(frame) };
      observed.shotSorted = await shot(page, "table-sorted.png");
      await frame.locator("#next").click();
      observed.nextPage = { page: await frame.locator("#page").textContent(), rows: await rowsShown(frame) };
      await frame.locator("#filter").fill("cairo");
      observed.filtered = {
        count: await frame.locator("#table-count").textContent(),
        page: await frame.locator("#page").textContent(),
        cities: [...new Set((await rowsShown(frame, 1)).map((r) => r[0]))],
      };
      observed.shotFiltered = await shot(page, "table-filtered.png");
      await page.evaluate(() => window.hostTheme("dark"));
      await frame.locator("html[data-theme=dark]").waitFor();
      observed.dark = await frame.locator("body").evaluate((b) => getComputedStyle(b).backgroundColor);
      observed.shotDark = await shot(page, "table-dark.png");
      await page.evaluate(() => window.hostTheme("light"));
      await frame.locator("html[data-theme=light]").waitFor();
      observed.light = await frame.locator("body").evaluate((b) => getComputedStyle(b).backgroundColor);
      await page.close();
      return observed;
    });

    await check("keyboard", async () => {
      const { args, result } = await run(TABLE_CODE);
      const page = await newPage(browser, bundle, hostHtml);
      const frame = await show(page, view, args, result);
      await frame.locator("#table tbody tr").first().waitFor();
      // From the host page into the view, then only keys: Tab to the filter, type, Tab to the second header, Enter.
      await page.locator("body").focus();
      const active = () => frame.locator(":focus").evaluateAll((e) => (e[0] ? e[0].id || e[0].textContent : null));
      const path = [];
      for (let i = 0; i < 12 && (await active()) !== "filter"; i++) {
        await page.keyboard.press("Tab");
        path.push(await active());
      }
      await page.keyboard.type("lima");
      await page.keyboard.press("Tab"); // the table's scroll area
      await page.keyboard.press("Tab"); // the first column's header
      await page.keyboard.press("Tab"); // the second's: amount
      const header = await active();
      await page.keyboard.press("Enter");
      await page.keyboard.press("Enter");
      const observed = {
        path,
        header,
        sort: await frame.locator("#table thead th:nth-child(2)").getAttribute("aria-sort"),
        rows: await rowsShown(frame),
        count: await frame.locator("#table-count").textContent(),
      };
      await page.close();
      return observed;
    });

    await check("figure", async () => {
      const { args, result } = await run(FIGURE_CODE);
      const page = await newPage(browser, bundle, hostHtml);
      const frame = await show(page, view, args, result);
      const img = frame.locator("#figures img").first();
      await img.waitFor();
      await img.evaluate((i) => (i.complete ? null : new Promise((r) => i.addEventListener("load", r, { once: true }))));
      const observed = {
        images: await frame.locator("#figures img").count(),
        drawn: await img.evaluate((i) => ({ complete: i.complete, width: i.naturalWidth, height: i.naturalHeight, src: i.src.slice(0, 22) })),
        caption: await frame.locator("#figures figcaption").first().textContent(),
        stdout: await frame.locator("#stdout").textContent(),
        status: await frame.locator("#status").textContent(),
      };
      observed.shot = await shot(page, "figure.png");
      await page.close();
      return observed;
    });

    await check("error", async () => {
      const { args, result } = await run(ERROR_CODE);
      const page = await newPage(browser, bundle, hostHtml);
      const frame = await show(page, view, args, result);
      const observed = {
        status: await frame.locator("#status").textContent(),
        statusClass: await frame.locator("#status").getAttribute("class"),
        message: await frame.locator("#message").textContent(),
        stderr: await frame.locator("#stderr").textContent(),
        stderrOpen: await frame.locator("#stderr-box").evaluate((d) => d.open),
        stdoutTitle: await frame.locator("#stdout-title").textContent(),
        cut: await texts(frame.locator("#stdout mark.cut")),
      };
      observed.shot = await shot(page, "error.png");
      await page.close();
      return observed;
    });

    await check("fakecut", async () => {
      const { args, result } = await run(FAKE_CUT_CODE);
      const page = await newPage(browser, bundle, hostHtml);
      const frame = await show(page, view, args, result);
      const observed = {
        cut: await texts(frame.locator("#stdout mark.cut")),
        dropped: result.structuredContent.stdout_dropped_bytes,
        fakeShownAsText: (await frame.locator("#stdout").textContent()).includes("... [5 bytes dropped] ..."),
      };
      await page.close();
      return observed;
    });

    await check("linked", async () => {
      const { args, result } = await run(LINKED_CODE);
      const page = await newPage(browser, bundle, hostHtml);
      const frame = await show(page, view, args, result);
      const link = frame.locator("#files button.link").first();
      const name = await link.textContent();
      await link.click();
      await frame.locator("#file-view pre").waitFor();
      const observed = {
        links: result.content.filter((b) => b.type === "resource_link").map((b) => b.uri),
        name,
        shown: (await frame.locator("#file-view pre").textContent()).slice(0, 40),
        shownChars: (await frame.locator("#file-view pre").textContent()).length,
        note: await frame.locator("#file-view p.note").textContent(),
      };
      observed.shot = await shot(page, "linked.png");
      await page.close();
      return observed;
    });

    await check("again", async () => {
      const { args, result } = await run(AGAIN_CODE);
      const page = await newPage(browser, bundle, hostHtml);
      const frame = await show(page, view, args, result);
      const before = await frame.locator("#meta").textContent();
      const callsBefore = calls;
      await frame.locator("#again").click();
      await frame.locator(`#meta:not(:text-is("${before}"))`).waitFor({ timeout: 30_000 });
      const observed = {
        before,
        after: await frame.locator("#meta").textContent(),
        stdout: await frame.locator("#stdout").textContent(),
        firstStdout: result.structuredContent?.stdout,
        callsThroughHost: calls - callsBefore,
        status: await frame.locator("#status").textContent(),
      };
      await page.close();
      return observed;
    });

    await check("hostile", async () => {
      const { args, result } = await run(HOSTILE_CODE);
      const page = await newPage(browser, bundle, hostHtml);
      const frame = await show(page, view, args, result);
      await frame.locator("#table tbody tr").first().waitFor();
      const observed = {
        printed: result.structuredContent?.stdout,
        stdout: await frame.locator("#stdout").textContent(),
        header: await frame.locator("#table thead th button span:first-child").first().textContent(),
        cell: await frame.locator("#table tbody td").first().textContent(),
        file: await frame.locator("#files li").first().textContent(),
        elements: await frame.locator("main img, main script, main b").count(),
        cutMarks: await frame.locator("mark.cut").count(),
        title: await frame.locator("html").evaluate(() => document.title),
      };
      await page.close();
      return observed;
    });

    await check("session", async () => {
      const { args, result } = await run(SESSION_CODE, { session: "new" });
      const page = await newPage(browser, bundle, hostHtml);
      const frame = await show(page, view, args, result);
      const observed = {
        handle: result.structuredContent?.session ?? null,
        session: await frame.locator("#session").textContent(),
        value: await frame.locator("#value").textContent(),
      };
      observed.shot = await shot(page, "session.png");
      // Run again runs in the session the result ran in, not in a new one.
      await frame.locator("#again").click();
      await frame.locator('#value:text-is("43")').waitFor({ timeout: 30_000 });
      observed.again = {
        session: await frame.locator("#session").textContent(),
        value: await frame.locator("#value").textContent(),
      };
      await client.callTool({ name: "close_session", arguments: { session: observed.handle } });
      await page.close();
      return observed;
    });

    await check("infinite", async () => {
      const { args, result } = await run(INFINITE_CODE);
      const page = await newPage(browser, bundle, hostHtml);
      const frame = await show(page, view, args, result);
      await frame.locator("#table tbody tr").first().waitFor();
      const missing = await frame.locator("#table tbody tr:nth-child(2) td:nth-child(2)").textContent();
      await frame.locator("#table thead th:nth-child(1) button").click();
      const ascending = (await rowsShown(frame, 1)).map((r) => r[0]);
      await frame.locator("#table thead th:nth-child(3) button").click();
      const observed = { missing, ascending, text: (await rowsShown(frame, 3)).map((r) => r[2]) };
      await page.close();
      return observed;
    });

    await check("size", async () => {
      const long = await run(LONG_CODE);
      const short = await run(SHORT_CODE);
      const page = await newPage(browser, bundle, hostHtml);
      await show(page, view, long.args, long.result);
      await page.waitForFunction(() => window.viewHeights.length > 0);
      const heights = async () => page.evaluate(() => window.viewHeights.slice());
      await page.waitForTimeout(300); // let the size settle: frames, not a deadline
      const tall = (await heights()).at(-1);
      await page.evaluate((answer) => window.hostResult(answer), short.result);
      await page.waitForFunction((before) => window.viewHeights.at(-1) < before, tall, { timeout: 10_000 }).catch(() => null);
      const observed = { tall, short: (await heights()).at(-1) };
      await page.close();
      return observed;
    });

    await check("bench", async () => {
      const times = {};
      const bench = config.bench ?? { rows: [10, 2_000_000], repeats: 5 };
      for (const rows of bench.rows) times[rows] = { firstPageMs: [], callMs: [], tableRows: 0 };
      for (let i = 0; i < bench.repeats; i++) {
        for (const rows of bench.rows) {
          const started = performance.now();
          const { args, result } = await run(benchCode(rows));
          times[rows].callMs.push(performance.now() - started);
          times[rows].tableRows = result.structuredContent?.table?.rows?.length ?? 0;
          const page = await newPage(browser, bundle, hostHtml);
          await page.evaluate((opened) => window.hostOpen(opened), { html: view.html, csp: view.csp, toolInput: args, theme: "light" });
          const shown = firstRowsAt(page);
          await page.frames().find((f) => f !== page.mainFrame()).waitForFunction(() => window.__firstRowsWatched === true);
          const sentAt = await page.evaluate((answer) => window.hostResult(answer), result);
          times[rows].firstPageMs.push((await shown) - sentAt);
          await page.close();
        }
      }
      // The same call from a client that shows the view (a table made, sent, checked) and from one that
      // does not (the same server's code, no table), alternating.
      const plain = new Client({ name: "python-runner-mcp view driver, no apps", version: "1.0.0" });
      await plain.connect(
        new StdioClientTransport({ command: config.command, args: config.args, env: config.env, cwd: config.cwd, stderr: "inherit" }),
      );
      const cost = { withTable: [], withoutTable: [], tableBytes: 0 };
      try {
        for (let i = 0; i < bench.repeats * 10; i++) {
          let started = performance.now();
          const shown = await callTool({ name: "run_python", arguments: { code: TABLE_COST_CODE } });
          cost.withTable.push(performance.now() - started);
          cost.tableBytes = JSON.stringify(shown.structuredContent?.table ?? null).length;
          started = performance.now();
          await plain.callTool({ name: "run_python", arguments: { code: TABLE_COST_CODE } });
          cost.withoutTable.push(performance.now() - started);
        }
      } finally {
        await plain.close();
      }
      return { times, cost };
    });

    await check("requests", async () => ({
      requests,
      outside: requests.filter((url) => !url.startsWith(HOST)),
      consoleErrors,
    }));
  } finally {
    await browser.close();
    await client.close();
  }
}

await main();

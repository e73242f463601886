// A TypeScript-SDK client (@modelcontextprotocol/sdk, Client + StdioClientTransport) driven by
// tests/e2e/test_real_clients.py. It starts the server itself, runs a fixed list of checks, and prints
// one JSON object per check on stdout: {"check": name, ...observations} or {"check": name, "error": ...}.
// It asserts nothing: pytest does. The server's stderr goes to this process's stderr.
//
// Usage: node ts_client.mjs '<json>' where json is
//   {"command": str, "args": [str], "env": {str: str}, "cwd": str, "pidFile": str}  (stdio), or
//   {"url": str, "headers": {str: str}, "pidFile": str}  (Streamable HTTP to a running server)
// pidFile: a path that does not exist yet; the cancelled run writes its own pid there.

import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const config = JSON.parse(process.argv[2]);

function emit(check, observations) {
  process.stdout.write(JSON.stringify({ check, ...observations }) + "\n");
}

function describe(error) {
  return { error: String(error?.message ?? error), name: error?.name ?? null, code: error?.code ?? null };
}

// Same rule as tests/helpers.py `alive`: a zombie counts as dead.
function alive(pid) {
  let stat;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "latin1");
  } catch {
    return false;
  }
  const state = stat.slice(stat.lastIndexOf(")") + 1).trim().split(/\s+/)[0];
  return state !== "Z" && state !== "X";
}

async function waitFor(predicate, timeoutMs) {
  const start = Date.now();
  while (!predicate()) {
    if (Date.now() - start > timeoutMs) return false;
    await sleep(20);
  }
  return true;
}

// config.only: the checks to run (besides "connect" and "close"); "long" (a 70 s run) and "largest" (a
// read of the largest kept stdout) run only when named there.
const only = config.only ? new Set(config.only) : null;

async function check(name, body) {
  const named = name === "long" || name === "largest"; // run only when named: each its own server
  if (name !== "connect" && name !== "close" && (only ? !only.has(name) : named)) return;
  try {
    emit(name, await body());
  } catch (error) {
    emit(name, describe(error));
  }
}

const transport = config.url
  ? new StreamableHTTPClientTransport(new URL(config.url), { requestInit: { headers: config.headers ?? {} } })
  : new StdioClientTransport({
      command: config.command,
      args: config.args,
      env: config.env,
      cwd: config.cwd,
      stderr: "inherit",
    });

// Record every message the server sends (the SDK installs its handler through this property), to report
// the negotiated protocol version and the raw progress notifications next to what the callbacks saw.
const received = [];
let sdkHandler;
Object.defineProperty(transport, "onmessage", {
  configurable: true,
  get() {
    return sdkHandler && ((message, extra) => {
      received.push(message);
      return sdkHandler(message, extra);
    });
  },
  set(handler) {
    sdkHandler = handler;
  },
});

const client = new Client({ name: "python-runner-mcp-ts-test", version: "1.0.0" });

await check("connect", async () => {
  await client.connect(transport);
  const initialize = received.find((m) => m.id !== undefined && m.result?.protocolVersion);
  return {
    protocolVersion: initialize?.result.protocolVersion ?? null,
    serverInfo: client.getServerVersion() ?? null,
    capabilities: client.getServerCapabilities() ?? null,
    serverPid: transport.pid,
  };
});

await check("list", async () => {
  const { tools } = await client.listTools();
  return {
    names: tools.map((t) => t.name),
    inputSchema: tools[0]?.inputSchema ?? null,
    outputSchema: tools[0]?.outputSchema ?? null,
    closeInputSchema: tools[1]?.inputSchema ?? null,
    closeOutputSchema: tools[1]?.outputSchema ?? null,
  };
});

function callReport(result) {
  return {
    text: result.content.length === 1 && result.content[0].type === "text" ? result.content[0].text : null,
    content: result.content,
    structuredContent: result.structuredContent ?? null,
    isError: result.isError ?? null,
  };
}

await check("call", async () =>
  callReport(await client.callTool({ name: "run_python", arguments: { code: "print(sum(range(10)))" } })),
);

await check("error", async () =>
  callReport(
    await client.callTool({ name: "run_python", arguments: { code: "raise ValueError('boom')" } }),
  ),
);

// Every kind of content a result can hold besides its text: an image, a text resource and a blob
// resource (files the code made, from a file handed in), and the value of the last expression.
await check("returns", async () =>
  callReport(await client.callTool({ name: "run_python", arguments: config.returnsArguments })),
);

await check("progress", async () => {
  const notifications = [];
  const before = received.length;
  const start = Date.now();
  const result = await client.callTool(
    { name: "run_python", arguments: { code: "import time; time.sleep(2.5); print('done')" } },
    undefined,
    {
      onprogress: (progress) => notifications.push({ ...progress, afterMs: Date.now() - start }),
    },
  );
  const raw = received.slice(before).filter((m) => m.method === "notifications/progress");
  return { ...callReport(result), notifications, rawNotifications: raw.map((m) => m.params) };
});

// A stdout the answer shows cut, read back whole through the resource_link the result carries.
await check("link", async () => {
  const code = "import sys\nfor i in range(60_000):\n    sys.stdout.write(f'{i:08d} ' + 'x' * 90 + '\\n')";
  const result = await client.callTool({ name: "run_python", arguments: { code } });
  const links = result.content.filter((block) => block.type === "resource_link");
  const read = links.length ? await client.readResource({ uri: links[0].uri }) : null;
  const text = read?.contents?.[0]?.text ?? null;
  return {
    links,
    fullOutput: result.structuredContent?.full_output ?? null,
    textBytes: text === null ? null : Buffer.byteLength(text, "utf8"),
    sha256: text === null ? null : createHash("sha256").update(text, "utf8").digest("hex"),
  };
});

// The largest stdout the server keeps, of text whose JSON is half as long again (the most it answers as
// text), read back through its link: the SDK's stdio transport takes a message of 10 MiB at most, and
// closed the connection over a longer one (found by a review). Then a call, on the same connection.
await check("largest", async () => {
  const code = "import sys\nsys.stdout.write('x\"' * (8 * 1024 * 1024))";
  const result = await client.callTool({ name: "run_python", arguments: { code } });
  const [link] = result.content.filter((block) => block.type === "resource_link");
  const read = await client.readResource({ uri: link.uri });
  const after = await client.callTool({ name: "run_python", arguments: { code: "print(6 * 7)" } });
  return {
    linkSize: link.size ?? null,
    textChars: read.contents[0].text?.length ?? null,
    after: after.structuredContent?.stdout ?? null,
  };
});

// A 70 s run that prints a line every 10 s, with a request timeout of 30 s that only progress resets
// (the SDK's resetTimeoutOnProgress): it ends only if progress comes at least every 30 s.
await check("long", async () => {
  const notifications = [];
  const start = Date.now();
  const code = "import time\nfor i in range(7):\n    print(f'step {i}', flush=True)\n    time.sleep(10)\nprint('done')";
  const result = await client.callTool({ name: "run_python", arguments: { code, timeout: 90 } }, undefined, {
    timeout: 30000,
    resetTimeoutOnProgress: true,
    onprogress: (progress) => notifications.push({ ...progress, afterMs: Date.now() - start }),
  });
  return { ...callReport(result), notifications, tookMs: Date.now() - start };
});

await check("cancel", async () => {
  const code =
    `import os, time\n` +
    `open(${JSON.stringify(config.pidFile)}, 'w').write(str(os.getpid()))\n` +
    `time.sleep(60)`;
  const controller = new AbortController();
  const call = client.callTool({ name: "run_python", arguments: { code, timeout: 60 } }, undefined, {
    signal: controller.signal,
  });
  let settled = null;
  call.then(
    (result) => (settled = { resolved: callReport(result) }),
    (error) => (settled = { rejected: describe(error) }),
  );
  const started = await waitFor(() => existsSync(config.pidFile) && readFileSync(config.pidFile, "utf8") !== "", 20_000);
  if (!started) return { error: "the run never wrote its pid file", settled };
  const pid = Number(readFileSync(config.pidFile, "utf8"));
  const abortedAt = Date.now();
  controller.abort("cancelled by the TypeScript test client");
  await waitFor(() => settled !== null, 5_000);
  // While the server is still connected: the run's process must go away without the server stopping.
  const gone = await waitFor(() => !alive(pid), 10_000);
  const goneAfterMs = Date.now() - abortedAt;
  const after = callReport(
    await client.callTool({ name: "run_python", arguments: { code: "print('still here')" } }),
  );
  const serverPidAlive = config.url ? null : alive(transport.pid);
  return { pid, settled, goneWhileConnected: gone, goneAfterMs, serverPidAlive, after };
});

// A session: kept state, a failed call rolled back, close_session, and the handle unknown after.
await check("session", async () => {
  const run = async (code, session) =>
    callReport(await client.callTool({ name: "run_python", arguments: { code, session } }));
  const started = await run("x = 41", "new");
  const handle = started.structuredContent?.session;
  const kept = await run("x += 1\nprint(x)", handle);
  const failed = await run("x = 0\nraise KeyError('k')", handle);
  const after = await run("print(x)", handle);
  const closed = callReport(await client.callTool({ name: "close_session", arguments: { session: handle } }));
  const unknown = await run("print(x)", handle);
  return { handle, started, kept, failed, after, closed, unknown };
});

await check("close", async () => {
  if (config.url) {
    await client.close();
    return { closed: true };
  }
  const serverPid = transport.pid;
  await client.close();
  const exited = await waitFor(() => !alive(serverPid), 10_000);
  return { serverPid, exited };
});

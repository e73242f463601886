// The test host page's script (bundled by view_driver.mjs with esbuild): it hosts the view the way an MCP Apps
// host does, with ext-apps' own host-side bridge (AppBridge + PostMessageTransport). The view's document goes
// into a sandboxed iframe (scripts only: an opaque origin, no access to this page) under the Content Security
// Policy its resource's _meta.ui.csp asks for; the host's MCP client is the driver's (node), reached through
// functions Playwright exposes on this page (hostCallTool, hostReadResource).
import { AppBridge, PostMessageTransport } from "@modelcontextprotocol/ext-apps/app-bridge";

// As ext-apps' example host builds it from _meta.ui.csp: nothing beyond inline script and style and data: images,
// unless the resource lists domains.
function policy(csp) {
  const list = (key) => (Array.isArray(csp?.[key]) ? csp[key].join(" ") : "");
  return [
    "default-src 'none'",
    "script-src 'unsafe-inline'",
    "style-src 'unsafe-inline'",
    `img-src data: ${list("resourceDomains")}`.trim(),
    `font-src ${list("resourceDomains") || "'none'"}`,
    `connect-src ${list("connectDomains") || "'none'"}`,
    `frame-src ${list("frameDomains") || "'none'"}`,
    `base-uri ${list("baseUriDomains") || "'none'"}`,
  ].join("; ");
}

function withPolicy(html, csp) {
  const meta = `<meta http-equiv="Content-Security-Policy" content="${policy(csp)}">`;
  return html.replace(/<head>/i, `<head>${meta}`);
}

// The view loaded, its handshake done and the call's input handed over; its result comes with hostResult.
window.hostOpen = async ({ html, csp, toolInput, theme }) => {
  document.getElementById("view")?.remove();
  const iframe = document.createElement("iframe");
  iframe.id = "view";
  iframe.title = "run_python result";
  iframe.setAttribute("sandbox", "allow-scripts");
  iframe.style.cssText = "width: 100%; height: 900px; border: 1px solid #ccc;";
  document.body.append(iframe);
  const bridge = new AppBridge(
    null,
    { name: "python-runner-mcp test host", version: "1.0.0" },
    { serverTools: {}, serverResources: {} },
    { hostContext: { theme, platform: "web", displayMode: "inline" } },
  );
  bridge.oncalltool = (params) => window.hostCallTool(params);
  bridge.onreadresource = (params) => window.hostReadResource(params);
  window.viewHeights = [];
  bridge.onsizechange = ({ height }) => {
    if (height) window.viewHeights.push(height);
  };
  const initialized = new Promise((resolve) => {
    bridge.oninitialized = resolve;
  });
  await bridge.connect(new PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
  iframe.srcdoc = withPolicy(html, csp);
  await initialized;
  window.bridge = bridge;
  await bridge.sendToolInput({ arguments: toolInput });
};

// Hands the view the call's result; returns when it was sent, in ms since the epoch (comparable with the
// view frame's clock: both count from performance.timeOrigin).
window.hostResult = async (toolResult) => {
  const sentAt = performance.timeOrigin + performance.now();
  await window.bridge.sendToolResult(toolResult);
  return sentAt;
};

window.hostTheme = (theme) => window.bridge.setHostContext({ theme, platform: "web", displayMode: "inline" });

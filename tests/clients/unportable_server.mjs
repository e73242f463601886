// Negative control for the Inspector's `--strict` schema lint: a stdio MCP server (TypeScript SDK) whose
// one tool spells a nullable field as `"type": ["string", "null"]`, which the Inspector reports as a
// portability warning. tests/e2e/test_real_clients.py uses it to show what a finding looks like, so that
// "no findings" for python -m runner means the lint ran and found nothing.

import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const server = new Server({ name: "unportable", version: "1.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: [
    {
      name: "nullable",
      inputSchema: {
        type: "object",
        properties: { value: { type: ["string", "null"] } },
        additionalProperties: false,
      },
    },
  ],
}));
await server.connect(new StdioServerTransport());

/** A downstream service for the tool calls to talk to over real HTTP: it answers, or holds
 * the request without answering (so a timeout happens after the request was sent). */

import { createServer, type IncomingMessage, type ServerResponse } from "node:http";

export interface Downstream {
  url: string;
  received: { path: string; body: unknown }[];
  close(): Promise<void>;
}

export async function startDownstream(): Promise<Downstream> {
  const received: { path: string; body: unknown }[] = [];
  const hanging = new Set<ServerResponse>();
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    let text = "";
    request.on("data", (chunk: Buffer) => (text += chunk.toString("utf8")));
    request.on("end", () => {
      const path = request.url ?? "/";
      received.push({ path, body: text ? (JSON.parse(text) as unknown) : null });
      if (path.startsWith("/hang")) {
        hanging.add(response); // received, written, never answered
        return;
      }
      response.writeHead(200, { "Content-Type": "application/json" });
      response.end(JSON.stringify({ id: `obj_${received.length}` }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        for (const response of hanging) response.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

// The floor of any proxy in front of the model server: a bare node:http
// reverse proxy (one keep-alive upstream pool, bodies piped, no auth, no
// routing, no usage) in its own process, as the gateway is. The inference
// bench times it beside the gateway and the direct call, so "added time"
// splits into what one more process hop costs on this machine under its
// load and what berth's gateway adds on top of that hop.
// Usage: node bare-proxy.mjs UPSTREAM_HOST UPSTREAM_PORT (prints its port)
import { Agent, createServer, request } from "node:http";

const [host, port] = [process.argv[2], Number(process.argv[3])];
const agent = new Agent({ keepAlive: true });
const server = createServer((req, res) => {
  const up = request({ agent, host, port, method: req.method, path: req.url, headers: req.headers }, (ur) => {
    res.writeHead(ur.statusCode ?? 502, ur.headers);
    res.socket?.setNoDelay(true);
    ur.pipe(res);
  });
  up.on("socket", (s) => s.setNoDelay(true));
  up.on("error", () => res.destroy());
  res.on("close", () => up.destroy());
  req.pipe(up);
});
server.listen(0, "127.0.0.1", () => console.log(server.address().port));

//go:build linux

package network

// netTool is a small Python program bound read-only at toolTarget in the
// sandboxes. It does what curl cannot be told to do (a Host header that
// disagrees with the URL, a TLS server name that differs from the CONNECT
// name, a bare DNS query, datagrams) and prints one JSON object.
//
//	http URL HOST                 GET URL through the proxy with Host: HOST
//	sni HOST:PORT SERVERNAME CA [socks]
//	                              CONNECT HOST:PORT (or SOCKS5 CONNECT), then TLS with SERVERNAME
//	resolve NAME                  socket.getaddrinfo(NAME, 80)
//	dns SERVER:PORT NAME          one A query over UDP (connected socket)
//	udp ADDR:PORT...              one datagram to each
//	urllib URL                    urllib.request.urlopen(URL) (proxy from the environment)
const netTool = `import json, socket, ssl, struct, sys, urllib.request

PROXY = ("127.0.0.1", 3128)


def out(v):
    print(json.dumps(v))


def hostport(s):
    h, _, p = s.rpartition(":")
    return h, int(p)


def read_head(s):
    buf = b""
    while not buf.endswith(b"\r\n\r\n"):
        c = s.recv(1)
        if not c:
            break
        buf += c
    return buf


def parse(buf):
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    first = lines[0].split() if lines else []
    status = int(first[1]) if len(first) > 1 and first[1].isdigit() else 0
    hdr = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdr[k.strip().lower()] = v.strip()
    return status, hdr, body


def read_all(s):
    buf = b""
    while True:
        c = s.recv(65536)
        if not c:
            return buf
        buf += c


def cmd_http(url, host):
    s = socket.create_connection(PROXY, timeout=20)
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (url, host)).encode())
    status, hdr, body = parse(read_all(s))
    out({"status": status, "x_proxy_error": hdr.get("x-proxy-error", ""), "body": body.decode("utf-8", "replace")})


def socks_open(target):
    """SOCKS5 CONNECT to target by name; the tunnel's status as HTTP's."""
    h, p = hostport(target)
    s = socket.create_connection(PROXY, timeout=20)
    s.sendall(b"\x05\x01\x00")
    if s.recv(2) != b"\x05\x00":
        return s, {"connect": 0}
    s.sendall(b"\x05\x01\x00\x03" + bytes([len(h)]) + h.encode() + struct.pack(">H", p))
    reply = b""
    while len(reply) < 10:
        c = s.recv(10 - len(reply))
        if not c:
            break
        reply += c
    ok = len(reply) == 10 and reply[1] == 0
    return s, {"connect": 200 if ok else 0, "socks_reply": reply[1] if len(reply) > 1 else -1}


def cmd_sni(target, server_name, ca, via="connect"):
    if via == "socks":
        s, res = socks_open(target)
        status = res["connect"]
    else:
        s = socket.create_connection(PROXY, timeout=20)
        s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
        status, hdr, _ = parse(read_head(s))
        res = {"connect": status, "x_proxy_error": hdr.get("x-proxy-error", "")}
    if status != 200:
        out(res)
        return
    ctx = ssl.create_default_context(cafile=ca)
    try:
        t = ctx.wrap_socket(s, server_hostname=server_name)
    except Exception as e:
        res["handshake"] = "failed"
        res["err"] = repr(e)
        out(res)
        return
    res["handshake"] = "ok"
    t.sendall(("GET /hello HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % target).encode())
    st, _, body = parse(read_all(t))
    res["status"] = st
    res["body"] = body.decode("utf-8", "replace")
    out(res)


def cmd_resolve(name):
    try:
        infos = socket.getaddrinfo(name, 80, proto=socket.IPPROTO_TCP)
    except Exception as e:
        out({"ok": False, "err": repr(e)})
        return
    out({"ok": True, "addrs": sorted({i[4][0] for i in infos})})


def cmd_dns(server, name):
    q = struct.pack(">HHHHHH", 0x4D54, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00" + struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    try:
        s.connect(hostport(server))
        s.send(q)
        r = s.recv(512)
    except Exception as e:
        out({"ok": False, "err": repr(e)})
        return
    out({"ok": True, "answers": struct.unpack(">H", r[6:8])[0]})


def cmd_udp(*targets):
    res = []
    for t in targets:
        h, p = hostport(t)
        s = socket.socket(socket.AF_INET6 if ":" in h else socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.sendto(b"moat network test", (h, p))
            res.append({"target": t, "ok": True})
        except Exception as e:
            res.append({"target": t, "ok": False, "err": repr(e)})
        s.close()
    out({"ok": True, "results": res})


def cmd_urllib(url):
    with urllib.request.urlopen(url, timeout=20) as r:
        out({"ok": True, "status": r.status, "body": r.read().decode("utf-8", "replace")})


{"http": cmd_http, "sni": cmd_sni, "resolve": cmd_resolve, "dns": cmd_dns,
 "udp": cmd_udp, "urllib": cmd_urllib}[sys.argv[1]](*sys.argv[2:])
`

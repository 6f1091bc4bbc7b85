import subprocess, socket, time, sys
def free_port():
    s = socket.socket(); s.bind(('127.0.0.1', 0)); p = s.getsockname()[1]; s.close(); return p
class R:
    def __init__(self, port):
        self.s = socket.create_connection(('127.0.0.1', port)); self.f = self.s.makefile('rb')
    def cmd(self, *args):
        out = [b'*%d\r\n' % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b'$%d\r\n%s\r\n' % (len(a), a))
        self.s.sendall(b''.join(out)); return self.read()
    def read(self):
        line = self.f.readline()[:-2]; t, rest = line[:1], line[1:]
        if t == b'+': return rest.decode()
        if t == b'-': raise Exception(rest.decode())
        if t == b':': return int(rest)
        if t == b'$':
            n = int(rest)
            if n < 0: return None
            d = self.f.read(n + 2)[:-2]; return d
        if t == b'*':
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
def evalsha_usec(r):
    for l in r.cmd('INFO', 'commandstats').decode().splitlines():
        if l.startswith('cmdstat_evalsha:'):
            return int(l.split('usec=')[1].split(',')[0])
    return 0
port = free_port()
srv = subprocess.Popen(['redis-server', '--port', str(port), '--save', '', '--appendonly', 'no', '--bind', '127.0.0.1'], stdout=subprocess.DEVNULL)
try:
    time.sleep(0.5)
    r = R(port)
    sha = {n: r.cmd('SCRIPT', 'LOAD', open('/tmp/gx/%s.lua' % n).read()).decode() for n in ['enter', 'leave', 'plain']}
    G, PER = int(sys.argv[1]), int(sys.argv[2])
    N = G * PER
    jobs = [('j%d' % i, 'g%d' % (i % G)) for i in range(N)]
    def run(name, pairs, batch):
        before = evalsha_usec(r)
        for k in range(0, len(pairs), batch):
            args = ['dq:{t}:']
            for id, g in pairs[k:k + batch]: args += [id, g]
            r.cmd('EVALSHA', sha[name], 1, 'dq:{t}:ready', *args)
        return (evalsha_usec(r) - before) / len(pairs)
    print('plain promote us/job %.3f' % run('plain', jobs, 1000))
    r.cmd('DEL', 'dq:{t}:ready')
    print('grouped enter us/job %.3f' % run('enter', jobs, 1000))
    # acks: drain the ready list in batches of 120, acking each fetched job
    gof = dict(jobs); total = 0.0; acked = 0
    before = evalsha_usec(r)
    while True:
        got = r.cmd('LPOP', 'dq:{t}:ready', 120)
        if not got: break
        got = [x.decode() for x in got]
        args = ['dq:{t}:']
        for id in got: args += [id, gof[id]]
        r.cmd('EVALSHA', sha['leave'], 1, 'dq:{t}:ready', *args)
        acked += len(got)
    print('grouped leave us/job %.3f (acked %d)' % ((evalsha_usec(r) - before) / acked, acked))
    print('keys left', r.cmd('DBSIZE'))
finally:
    srv.kill(); srv.wait()

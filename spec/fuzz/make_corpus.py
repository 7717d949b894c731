#!/usr/bin/env python3
"""make_corpus.py — writes the seed corpora of spec/fuzz/corpus/<target>/.

Run from anywhere: python3 spec/fuzz/make_corpus.py [kernel.so ...]
Python's standard library only (the .npy/.npz seeds NumPy wrote are taken
from spec/fixtures, which spec/fixtures/make_fixtures.py made with NumPy;
a few more are written here by the same format rules).  The optional
arguments are real kernel-cache entries (<key>.so from a tgl cache
directory) for the cache_entry corpus.  The graph corpus is byte programs
for fuzz_graph.c's decoder; see its comment for the encoding.  Files
named by a SHA-1 are inputs libFuzzer found and merged in
(scripts/fuzz.sh TARGET SECONDS --merge); this script leaves them.
"""
import gzip, io, os, struct, sys, zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, '..', 'fixtures')
OUT = os.path.join(HERE, 'corpus')


def out(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


def npy(descr, shape, payload, fortran=False, version=1):
    """A .npy image by NumPy's format: magic, version, header dict padded
    with spaces to a multiple of 64 and ended by a newline, the data."""
    sh = '(' + ''.join('%d,' % n if len(shape) == 1 else '%d, ' % n for n in shape).rstrip(' ')
    sh = sh[:-1] + ')' if len(shape) > 1 else sh + ')'
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, 'True' if fortran else 'False', sh)
    lenfmt = '<H' if version == 1 else '<I'
    pre = 6 + 2 + struct.calcsize(lenfmt)
    pad = (64 - (pre + len(d) + 1) % 64) % 64
    d = d + ' ' * pad + '\n'
    return b'\x93NUMPY' + bytes([version, 0]) + struct.pack(lenfmt, len(d)) + d.encode() + payload


def main():
    # npy: NumPy's own files (dtypes, orders, 0-d, 0-size, versions 1-3)
    for f in sorted(os.listdir(FIX)):
        if f.endswith('.npy'):
            out('npy', f, open(os.path.join(FIX, f), 'rb').read())
    out('npy', 'gen_i8_2x0x3.npy', npy('<i8', (2, 0, 3), b''))
    out('npy', 'gen_u1_fortran_2x2.npy', npy('|u1', (2, 2), bytes([1, 2, 3, 4]), fortran=True))
    out('npy', 'gen_be_i4_fortran_3x2.npy',
        npy('>i4', (3, 2), struct.pack('>6i', 1, -2, 3, -4, 5, -6), fortran=True))
    out('npy', 'gen_f4_v2_1.npy', npy('<f4', (1,), struct.pack('<f', 1.5), version=2))

    # npz: NumPy's archives (stored, deflated, zip64), and two made here
    for f in ('savez.npz', 'savez_compressed.npz', 'zip64.npz', 'notnpy.npz'):
        out('npz', f, open(os.path.join(FIX, f), 'rb').read())
    for method, name in ((zipfile.ZIP_STORED, 'gen_stored.npz'),
                         (zipfile.ZIP_DEFLATED, 'gen_deflated.npz')):
        b = io.BytesIO()
        with zipfile.ZipFile(b, 'w', method) as z:
            for ename, data in (('W.npy', npy('<f8', (2, 2), struct.pack('<4d', 1, 2, 3, 4))),
                                ('b.npy', npy('|b1', (3,), bytes([1, 0, 1]))),
                                ('empty.npy', npy('<i4', (0,), b''))):
                # a fixed time stamp: the seeds do not change when rewritten
                z.writestr(zipfile.ZipInfo(ename, (1980, 1, 1, 0, 0, 0)), data, compress_type=method)
        out('npz', name, b.getvalue())
    b = io.BytesIO()
    with zipfile.ZipFile(b, 'w') as z:
        pass
    out('npz', 'gen_empty.npz', b.getvalue())

    # idx: each type code, ranks 1-3, a 0-size one, one gzip'd
    def idx(code, shape, payload):
        return bytes([0, 0, code, len(shape)]) + b''.join(struct.pack('>I', n) for n in shape) + payload
    out('idx', 'u8_2x3.idx', idx(0x08, (2, 3), bytes([0, 1, 2, 253, 254, 255])))
    out('idx', 'i8_3.idx', idx(0x09, (3,), bytes([0x7f, 0x80, 0xff])))
    out('idx', 'i16_2.idx', idx(0x0B, (2,), struct.pack('>2h', 258, -2)))
    out('idx', 'i32_1x2x1.idx', idx(0x0C, (1, 2, 1), struct.pack('>2i', -2, 7)))
    out('idx', 'f32_1.idx', idx(0x0D, (1,), struct.pack('>f', 1.5)))
    out('idx', 'f64_2.idx', idx(0x0E, (2,), struct.pack('>2d', -2.25, 1e300)))
    out('idx', 'u8_0x4.idx', idx(0x08, (0, 4), b''))
    out('idx', 'u8_4.idx.gz', gzip.compress(idx(0x08, (4,), bytes([9, 8, 7, 6])), mtime=0))

    # cache_entry: real entries, one cut short, one only the ELF header
    for i, so in enumerate(sys.argv[1:]):
        data = open(so, 'rb').read()
        out('cache_entry', 'entry%d.elf' % i, data)
        if i == 0:
            out('cache_entry', 'entry0_cut.elf', data[:2048])
            out('cache_entry', 'entry0_ehdr.elf', data[:64])

    # host_args: typical command lines (words separated by NUL)
    lines = [['script.lua'], ['-e', 'print(1)'], ['-eprint(1)', '-l', 'tgl', 'x.lua', 'a', 'b'],
             ['-i'], ['-v'], ['--cache-info'], ['--cache-clear', '-e', 'x=1'], ['--calibrate'],
             ['--', '-'], ['-'], ['-h'], ['--help'], ['-e'], ['-x'], ['-ltgl.nn', '--', 'f.lua', '-e'],
             ['-v', '-i', '-e', 'a=1', '-', 'arg']]
    for i, words in enumerate(lines):
        out('host_args', 'argv%02d' % i, b'\0'.join(w.encode() for w in words))
    graph_programs()


def graph_programs():
    """Byte programs for fuzz_graph.c (its comment gives the encoding)."""
    import re
    src = open(os.path.join(HERE, '..', '..', 'src', 'engine', 'ops', 'ops.h')).read()
    names = [n for _, n in re.findall(r'_\(([A-Z0-9_]+), "([a-z0-9_]+)"', src) if _ != 'ID']
    names = names[names.index('neg'):]
    op = lambda name: list(divmod(names.index(name), 256))
    F32, F64, I32 = 0, 1, 2
    def sizes(shape, bcast):
        return [n for d, n in enumerate(shape) if not bcast >> d & 1]
    def inp(dt, shape, bcast=0):
        return [[0, dt, len(shape), bcast] + sizes(shape, bcast)]
    def const(dt, shape, v):
        return [[1, dt, len(shape)] + list(shape) + [v]]
    def shared(dt, shape, v, bcast=0):
        return [[2, bcast, dt, len(shape)] + sizes(shape, bcast) + [v]]
    def apply(name, ins, ints=(), flags=0, f=(0, 0)):
        return [[3] + op(name) + [len(ins)] + list(ins) + [len(ints)] +
                [i & 255 for i in ints] + [flags, f[0], f[1]]]
    def grad(cost, wrt, disc=0):
        return [[4, cost, len(wrt) - 1] + list(wrt) + [disc]]
    def prog(mode, linker, *parts):
        steps = [st for part in parts[:-1] for st in part]
        return bytes([mode, linker, len(steps)] + [b for st in steps for b in st] + parts[-1])
    def end(outs, values):
        return [len(outs), 1] + list(outs) + list(values)
    progs = {
        # FAST_RUN: tanh(x + y) summed, its gradient wrt x
        'tanh_add_grad': prog(0, 0, inp(F32, (2, 3)), inp(F32, (2, 3)), apply('add', (0, 1)),
                              apply('tanh', (2,)), apply('sum', (3,), ints=(0, 1)),
                              grad(4, (0,)), end((4, 5), (3, 4))),
        # FAST_RUN, CVM_NOGC: a layer sigmoid(W.x + b); W (shared) updated by its gradient
        'layer_update': prog(0, 1, shared(F64, (2, 3), 3), inp(F64, (3,)), shared(F64, (2,), 1),
                             apply('dot', (0, 1)), apply('add', (3, 2)), apply('sigmoid', (4,)),
                             apply('sum', (5,), ints=(0,)), grad(6, (0,)), apply('sub', (0, 7)),
                             [[7, 0, 8]], end((6,), (1,))),
        # FAST_COMPILE: a broadcastable row times a matrix, softmax, argmax
        'bcast_softmax': prog(1, 0, inp(F32, (1, 3), bcast=1), inp(F32, (2, 3)),
                              apply('mul', (0, 1)), apply('softmax', (2,), ints=(1,)),
                              apply('argmax', (3,), ints=(1,)), end((3, 4), (4, 5))),
        # DEBUG, VM: exp of a slice x[1:3] of an int vector cast to float64
        'debug_slice': prog(2, 2, inp(I32, (3,)), apply('cast', (0,), ints=(F64,)),
                            apply('subtensor', (1,), ints=(1, 1, 3, 1)), apply('exp', (2,)),
                            end((3,), (5,))),
        # FAST_RUN: a 0-size input plus a constant row, transposed
        'dimshuffle_zero': prog(0, 0, inp(F32, (0, 2)), const(F32, (1, 2), 4),
                                apply('add', (0, 1)), apply('dimshuffle', (2,), ints=(1, 0)),
                                end((3,), (1,))),
        # eager: add of two constants (broadcast) by the reference kernel, then tanh of it
        'eval_add': prog(0, 0, const(F32, (2, 3), 1), const(F32, (3,), 4),
                         [[8] + op('add') + [2, 0, 1, 0, 0, 0, 0]], apply('tanh', (2,)),
                         end((3,), ())),
        # conv2d of a (1,1,3,3) input by a (1,1,2,2) shared kernel, 2x2 max pooling, grad
        'conv_pool_grad': prog(0, 0, inp(F32, (1, 1, 3, 3), bcast=3), shared(F32, (1, 1, 2, 2), 3, bcast=3),
                               apply('conv2d', (0, 1), ints=(1, 1, 0, 0, 1, 1, 1)),
                               apply('max_pool2d', (2,), ints=(2, 2, 1, 1, 0, 0)),
                               apply('sum', (3,), ints=(0, 1, 2, 3)), grad(4, (1,)),
                               end((4, 5), (4,))),
        # the R-operator of tanh along v
        'rop_tanh': prog(0, 0, inp(F64, (2,)), inp(F64, (2,)), apply('tanh', (0,)),
                         [[5, 2, 0, 1, 0]], end((3,), (3, 1))),
    }
    for name, data in progs.items():
        out('graph', name, data)


if __name__ == '__main__':
    main()

"""Lets Lingvo 0.14.2's op library load on a glibc older than 2.38.

Why: the wheel's lingvo/core/ops/x_ops.so was built against glibc 2.38 and
GCC 13's libstdc++, and asks for three symbols this machine (Debian 12:
glibc 2.36, libstdc++ of GCC 12) lacks:
  __isoc23_strtol              GLIBC_2.38     (C23 strtol; also parses "0b")
  std::ios_base_library_init() GLIBCXX_3.4.32 (iostream init hook)
  __cxa_call_terminate         CXXABI_1.3.15  (noexcept violation -> terminate)
So `import lingvo.core.py_utils` (hence every lingvo.core module used here)
fails with
  NotFoundError: .../x_ops.so: version `GLIBC_2.38' not found
(then `GLIBCXX_3.4.32' once that one is out of the way). No other .so of the
wheel's core needs more than glibc 2.34.

What this does (only inside a Lingvo venv, never to the repository):
  1. `patch` marks those three entries of x_ops.so's version-needs table
     (.gnu.version_r) weak (VER_FLG_WEAK), so the dynamic loader no longer
     refuses the file when libc lacks that version (glibc, elf/dl-version.c:
     a weak version that is missing is not fatal). A backup is kept as
     x_ops.so.orig.
  2. `Preload()` builds (once, with c++) and loads RTLD_GLOBAL a tiny
     library defining the three symbols (strtol; terminate; a static
     std::ios_base::Init), so they resolve. (C23 strtol differs only for
     "0b..." strings, which Lingvo's learner, optimizers and schedules never
     parse.)

Usage, in the Lingvo venv:
  python tools/lingvo_glibc_shim.py patch   # once per venv
  and call lingvo_glibc_shim.Preload() before importing lingvo (the recorders
  under tools/ do).
"""

import ctypes
import os
import struct
import subprocess
import sys
import sysconfig

VER_FLG_WEAK = 0x2
VERSIONS = (b'GLIBC_2.38', b'GLIBCXX_3.4.32', b'CXXABI_1.3.15')
_SHIM_CC = r"""
#include <cstdlib>
#include <exception>
#include <ios>
extern "C" long __isoc23_strtol(const char *s, char **e, int b) {
  return std::strtol(s, e, b);
}
extern "C" void __cxa_call_terminate(void *) { std::terminate(); }
namespace std {
void ios_base_library_init() { static std::ios_base::Init init; }
}
"""


def _XOps():
  site = sysconfig.get_paths()['purelib']
  return os.path.join(site, 'lingvo', 'core', 'ops', 'x_ops.so')


def _Sections(data):
  """[(name_offset, type, offset, size, link)] of an ELF64 little-endian."""
  shoff, = struct.unpack_from('<Q', data, 0x28)
  shentsize, shnum = struct.unpack_from('<HH', data, 0x3A)
  out = []
  for i in range(shnum):
    base = shoff + i * shentsize
    name, typ = struct.unpack_from('<II', data, base)
    offset, size = struct.unpack_from('<QQ', data, base + 0x18)
    link, = struct.unpack_from('<I', data, base + 0x28)
    out.append((name, typ, offset, size, link))
  return out


def Patch(path, versions=VERSIONS):
  """Marks each of `versions` weak in the version-needs table of ELF `path`.

  Returns the number of entries changed (0 if already weak or absent).
  Raises ValueError if `path` is not a little-endian ELF64 file.
  """
  with open(path, 'rb') as f:
    data = bytearray(f.read())
  if data[:4] != b'\x7fELF' or data[4] != 2 or data[5] != 1:
    raise ValueError('%s: not a little-endian ELF64 file' % path)
  sections = _Sections(data)
  changed = 0
  for _, typ, offset, _, link in sections:
    if typ != 0x6ffffffe:  # SHT_GNU_verneed
      continue
    strtab = sections[link][2]
    vn = offset
    while True:
      _, _, vn_file, vn_aux, vn_next = struct.unpack_from('<HHIII', data, vn)
      cnt, = struct.unpack_from('<H', data, vn + 2)
      aux = vn + vn_aux
      for _ in range(cnt):
        _, flags, _, name, nxt = struct.unpack_from('<IHHII', data, aux)
        end = data.index(b'\0', strtab + name)
        if bytes(data[strtab + name:end]) in versions and not (
            flags & VER_FLG_WEAK):
          struct.pack_into('<H', data, aux + 4, flags | VER_FLG_WEAK)
          changed += 1
        aux += nxt
      if not vn_next:
        break
      vn += vn_next
  if changed:
    if not os.path.exists(path + '.orig'):
      with open(path + '.orig', 'wb') as f, open(path, 'rb') as g:
        f.write(g.read())
    with open(path, 'wb') as f:
      f.write(data)
  return changed


def Preload():
  """Builds (once) and loads the symbol shim RTLD_GLOBAL (see the docstring)."""
  so = os.path.join(os.path.dirname(_XOps()), 'liblingvo_glibc_shim.so')
  if not os.path.exists(so):
    src = so[:-3] + '.cc'
    with open(src, 'w') as f:
      f.write(_SHIM_CC)
    subprocess.check_call(['c++', '-shared', '-fPIC', '-O2', src, '-o', so])
  ctypes.CDLL(so, mode=ctypes.RTLD_GLOBAL)


if __name__ == '__main__':
  if sys.argv[1:] != ['patch']:
    sys.exit('usage: python tools/lingvo_glibc_shim.py patch')
  n = Patch(_XOps())
  Preload()
  print('%s: %d version entr%s marked weak; shim built' %
        (_XOps(), n, 'y' if n == 1 else 'ies'))

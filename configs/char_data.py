"""Character-level text that ships with CPython: the pydoc topics.

`pydoc_data.topics.topics` is a dict {topic name: help text} in every
CPython install (the text of `help('if')`, etc., generated from the Python
documentation). Joined in sorted key order it is about 465,000 characters
of English prose with code examples (464,970 on CPython 3.11; the exact
text differs slightly between Python versions). Nothing is downloaded.

  * `Text()`: the joined text.
  * `Vocab(text)`: the sorted characters of the text (index = id).
  * `Split(holdout=0.1)`: (train ids, test ids): the first 90 % / the last
    10 % of the text, as int32 numpy arrays over the vocabulary of the
    *whole* text (so a test character never is out of vocabulary; with the
    pydoc text every test character also occurs in the train part).
  * `Windows(ids, seq_len, stride)`: (inputs, targets) int32
    [num_windows, seq_len]: targets are inputs shifted by one character.
  * `TrainWindows` / `TestWindows`: windows of the two splits.
  * `UnigramBitsPerChar` / `BigramBitsPerChar`: bits/char of the test text
    under add-one smoothed train statistics: the baselines a language model
    must beat (test_char_data checks them: 4.69 unigram, 3.55 bigram on
    CPython 3.11).
  * `CompressorBitsPerChar(train_text, test_text, name)`: bits/char a
    general-purpose compressor ('lzma' as `xz -9e`, 'bz2', 'zlib') spends
    on the test text when it has seen the train text: the bound a language
    model trained on the text should beat. `python -m configs.char_data
    --compressor_bound` prints it for the three (lzma 1.411 on CPython 3.11).
"""

import bz2
import functools
import lzma
import sys
import zlib

import numpy as np

HOLDOUT = 0.1


@functools.lru_cache(maxsize=1)
def Text():
  """Returns the pydoc topics joined in sorted key order (a str)."""
  from pydoc_data import topics  # pylint: disable=g-import-not-at-top
  return ''.join(topics.topics[k] for k in sorted(topics.topics))


def Vocab(text=None):
  """Returns the sorted distinct characters of `text` (default: Text())."""
  return sorted(set(Text() if text is None else text))


def Encode(text, vocab):
  """Returns int32 ids of `text` under `vocab` (a list of characters)."""
  index = {c: i for i, c in enumerate(vocab)}
  return np.array([index[c] for c in text], dtype=np.int32)


def Decode(ids, vocab):
  """Returns the str of `ids` under `vocab`."""
  return ''.join(vocab[int(i)] for i in ids)


@functools.lru_cache(maxsize=4)
def Split(holdout=HOLDOUT):
  """Returns (train_ids, test_ids, vocab): the text split at 1 - holdout.

  The last `holdout` fraction of the characters is the test text.
  """
  text = Text()
  vocab = Vocab(text)
  ids = Encode(text, vocab)
  cut = int(round(len(ids) * (1.0 - holdout)))
  return ids[:cut], ids[cut:], vocab


def Windows(ids, seq_len, stride=None):
  """Returns (inputs, targets), int32 [n, seq_len], targets = inputs + 1 char.

  Windows start at 0, stride, 2*stride, ... (stride defaults to seq_len: non
  overlapping) as long as the window and its one-character-later target fit.
  """
  stride = stride or seq_len
  if seq_len <= 0 or stride <= 0:
    raise ValueError('seq_len and stride must be > 0, got %r, %r.' %
                     (seq_len, stride))
  n = (len(ids) - 1 - seq_len) // stride + 1
  if n <= 0:
    raise ValueError('Text of %d ids is too short for seq_len %d.' %
                     (len(ids), seq_len))
  starts = np.arange(n) * stride
  idx = starts[:, None] + np.arange(seq_len)[None, :]
  return ids[idx], ids[idx + 1]


def TrainWindows(seq_len, stride=None, holdout=HOLDOUT):
  """(inputs, targets) windows of the train text."""
  return Windows(Split(holdout)[0], seq_len, stride)


def TestWindows(seq_len, stride=None, holdout=HOLDOUT):
  """(inputs, targets) windows of the held-out text (non-overlapping)."""
  return Windows(Split(holdout)[1], seq_len, stride)


def UnigramBitsPerChar(train_ids, test_ids, vocab_size):
  """Bits/char of test_ids under add-one smoothed unigram train counts."""
  counts = np.bincount(train_ids, minlength=vocab_size) + 1.0
  logp = np.log2(counts / counts.sum())
  return float(-logp[test_ids].mean())


def BigramBitsPerChar(train_ids, test_ids, vocab_size):
  """Bits/char of test_ids[1:] given the previous char, add-one smoothed.

  P(b | a) = (count(a b) + 1) / (count(a) + vocab_size) over train bigrams.
  """
  counts = np.ones((vocab_size, vocab_size))
  np.add.at(counts, (train_ids[:-1], train_ids[1:]), 1.0)
  logp = np.log2(counts / counts.sum(axis=1, keepdims=True))
  return float(-logp[test_ids[:-1], test_ids[1:]].mean())


_COMPRESSORS = {
    'lzma': lambda b: lzma.compress(
        b, preset=9 | lzma.PRESET_EXTREME),  # xz -9e
    'bz2': lambda b: bz2.compress(b, 9),
    'zlib': lambda b: zlib.compress(b, 9),
}


def CompressorBitsPerChar(train_text, test_text, name='lzma'):
  """Bits/char the compressor spends on test_text after train_text.

  (len(C(train + test)) - len(C(train))) * 8 / len(test), with C one of
  'lzma' (preset 9 | PRESET_EXTREME, as `xz -9e`), 'bz2' (level 9) or
  'zlib' (level 9), all from Python's standard library, on the UTF-8 bytes.
  A conditional code length: what the compressor needs for the test text
  given the train text, comparable to a model's held-out bits/char. (bz2
  and zlib compress in blocks/windows of 900 kB / 32 kB, so they see only
  the end of the train text.)

  Args:
    train_text, test_text: str.
    name: a key of _COMPRESSORS.

  Returns:
    float, bits per test character.

  Raises:
    ValueError: unknown `name` or empty test_text.
  """
  if name not in _COMPRESSORS:
    raise ValueError('compressor %r: expected one of %s.' %
                     (name, ', '.join(sorted(_COMPRESSORS))))
  if not test_text:
    raise ValueError('test_text is empty: no bits per character to give.')
  c = _COMPRESSORS[name]
  train = train_text.encode('utf-8')
  both = train + test_text.encode('utf-8')
  return (len(c(both)) - len(c(train))) * 8.0 / len(test_text)


def CompressorBound(holdout=HOLDOUT):
  """{name: bits/char} of every compressor on this module's split."""
  train_ids, test_ids, vocab = Split(holdout)
  train, test = Decode(train_ids, vocab), Decode(test_ids, vocab)
  return {name: CompressorBitsPerChar(train, test, name)
          for name in sorted(_COMPRESSORS)}


def Main(argv, out=sys.stdout):
  """`python -m configs.char_data --compressor_bound`: prints the bound.

  Returns the exit code: 0, or 2 for any other arguments (with the usage).
  """
  if argv[1:] != ['--compressor_bound']:
    print('usage: python -m configs.char_data --compressor_bound', file=out)
    return 2
  _, test_ids, _ = Split()
  print('held-out text: %d characters (the last %d %% of the pydoc topics)'
        % (len(test_ids), round(100 * HOLDOUT)), file=out)
  for name, bits in sorted(CompressorBound().items(), key=lambda x: x[1]):
    print('%-5s %.3f bits/char' % (name, bits), file=out)
  return 0


if __name__ == '__main__':
  sys.exit(Main(sys.argv))

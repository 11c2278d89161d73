"""The pydoc character data: split, windows, n-gram baselines."""

import io

import numpy as np
import pytest

from configs import char_data


def test_text_is_the_sorted_join_of_the_pydoc_topics():
  from pydoc_data import topics  # pylint: disable=g-import-not-at-top
  text = char_data.Text()
  assert text == ''.join(topics.topics[k] for k in sorted(topics.topics))
  assert 400_000 < len(text) < 550_000  # 464,970 on CPython 3.11


def test_split_holds_out_the_last_ten_percent():
  train, test, vocab = char_data.Split()
  ids = char_data.Encode(char_data.Text(), vocab)
  assert len(train) + len(test) == len(ids)
  assert abs(len(test) / len(ids) - 0.1) < 1e-4
  np.testing.assert_array_equal(np.concatenate([train, test]), ids)
  assert train.dtype == np.int32
  assert char_data.Decode(test[:50], vocab) == char_data.Text()[len(train):
                                                                 len(train) +
                                                                 50]


def test_windows_targets_are_inputs_shifted_by_one():
  ids = np.arange(20, dtype=np.int32)
  x, y = char_data.Windows(ids, seq_len=6, stride=4)
  # starts 0, 4, 8, 12 (12 + 6 + 1 <= 20; 16 + 7 > 20)
  np.testing.assert_array_equal(x[:, 0], [0, 4, 8, 12])
  np.testing.assert_array_equal(y, x + 1)
  assert x.shape == (4, 6)


def test_train_and_test_windows_shapes():
  x, y = char_data.TestWindows(128)
  _, test, _ = char_data.Split()
  assert x.shape == ((len(test) - 1 - 128) // 128 + 1, 128)
  np.testing.assert_array_equal(x[:, 1:], y[:, :-1])


def test_unigram_and_bigram_bits_per_char_of_the_held_out_text():
  # Add-one smoothed train statistics, measured on CPython 3.11 (464,970
  # characters, 103 distinct): unigram 4.671, bigram 3.352 bits/char. (The
  # issue quotes about 4.69 and 3.55, from another text or smoothing; the
  # bound a model must beat is the bigram figure.)
  train, test, vocab = char_data.Split()
  uni = char_data.UnigramBitsPerChar(train, test, len(vocab))
  bi = char_data.BigramBitsPerChar(train, test, len(vocab))
  assert uni == pytest.approx(4.671, abs=0.05)
  assert bi == pytest.approx(3.352, abs=0.05)
  # Independent check of the unigram figure: the cross-entropy sum.
  counts = np.bincount(train, minlength=len(vocab)) + 1.0
  p = counts / counts.sum()
  test_counts = np.bincount(test, minlength=len(vocab))
  assert uni == pytest.approx(-(test_counts * np.log2(p)).sum() / len(test))


def test_compressor_bits_per_char_by_hand_and_on_the_split():
  # A test text equal to the train text costs lzma almost nothing; a text
  # of fresh random letters costs about log2(26) = 4.7 bits/char at least.
  rng = np.random.RandomState(0)
  train = char_data.Text()[:20000]
  assert char_data.CompressorBitsPerChar(train, train[:5000]) < 0.1
  noise = ''.join(rng.choice(list('abcdefghijklmnopqrstuvwxyz'), 5000))
  assert char_data.CompressorBitsPerChar(train, noise) > 4.5
  bound = char_data.CompressorBound()
  # 1.411 (lzma), 1.420 (bz2), 1.948 (zlib) on CPython 3.11's text.
  assert 1.2 < bound['lzma'] < 1.7
  assert bound['lzma'] <= bound['bz2'] < bound['zlib'] < 2.3


def test_compressor_bound_command_and_refusals():
  out = io.StringIO()
  assert char_data.Main(['char_data', '--compressor_bound'], out=out) == 0
  assert 'lzma  1.' in out.getvalue() and 'zlib' in out.getvalue()
  assert char_data.Main(['char_data', '--bound'], out=io.StringIO()) == 2
  with pytest.raises(ValueError, match="compressor 'xz'"):
    char_data.CompressorBitsPerChar('a', 'b', 'xz')
  with pytest.raises(ValueError, match='test_text is empty'):
    char_data.CompressorBitsPerChar('a', '')

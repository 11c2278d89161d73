"""Lingvo's registry shape (issue 23.6): Dev() and Test() datasets.

configs/lingvo_ported.py's p.train lines are Lingvo's MNIST classifier
block, unchanged; its datasets are Train(), Dev() and Test(). Its run
through the command line: tests/test_training/test_lingvo_train_params.py.
"""

import pytest

from configs import inputs
from params import registry

_KEY = 'lingvo_ported.DigitsMlpLingvoTrain'


def test_dev_and_test_split_the_digits_without_overlap():
  sizes, seen = {}, []
  for split in ('train', 'dev', 'test'):
    gen = inputs.DigitsInput.Params().Set(
        name=split, split=split, dev_fraction=0.1, test_fraction=0.2,
        shuffle=False).Instantiate()
    x = gen.LoadArrays()['features']
    sizes[split] = len(x)
    seen.append({row.tobytes() for row in x})
  # 1797 digits: test round(0.2 n) = 359, dev round(0.1 n) = 180.
  assert sizes == {'train': 1258, 'dev': 180, 'test': 359}
  assert not (seen[0] & seen[1]) and not (seen[1] & seen[2])


def test_dev_split_needs_a_dev_fraction():
  with pytest.raises(ValueError, match="split 'dev' needs dev_fraction > 0"):
    inputs.DigitsInput.Params().Set(name='x', split='dev').Instantiate()


def test_registry_picks_the_eval_dataset_by_name():
  assert registry.GetParams(_KEY).eval_input.split == 'dev'  # First.
  assert registry.GetParams(_KEY, eval_dataset='test').eval_input.split == (
      'test')
  with pytest.raises(ValueError, match='defines no Eval\\(\\); its eval '
                     'datasets: dev, test'):
    registry.GetParams(_KEY, eval_dataset='eval')


def test_a_class_without_any_eval_dataset_is_refused():
  class NoEval:  # pylint: disable=unused-variable
    def Task(self):
      pass

    def Train(self):
      pass

  with pytest.raises(ValueError, match='must define Eval\\(\\), or Dev'):
    registry.Register(NoEval)

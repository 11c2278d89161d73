"""model_analysis.txt: variables, shapes, sizes, learners and totals."""


from learner.training.model import model_analysis
from params import registry


def _TwoLearnerTask():
  p = registry.GetParams('multi.TwoLearners').task
  task = p.Instantiate()
  task.CreateLearners()
  return task


def test_lists_every_model_variable_with_shape_size_and_learner():
  task = _TwoLearnerTask()
  text = model_analysis.ModelAnalysis(task, task.learners)
  lines = text.splitlines()
  # digits MLP 64 -> 64 -> 10 (configs/multi.py via configs/digits.py).
  rows = {l.split()[0]: l.split() for l in lines[1:] if l.startswith('digits/')}
  assert sorted(rows) == ['digits/layer_0/b', 'digits/layer_0/w',
                          'digits/layer_1/b', 'digits/layer_1/w']
  assert rows['digits/layer_0/w'][1:] == ['[64,', '64]', '4096', 'float32',
                                          'first']
  assert rows['digits/layer_1/w'][-2:] == ['float32', 'rest']
  assert rows['digits/layer_1/b'][-3] == '10'
  # first: 64*64 + 64 = 4160; rest: 64*10 + 10 = 650; total 4810.
  assert 'Learner first: 2 variables, 4160 values' in lines
  assert 'Learner rest: 2 variables, 650 values' in lines
  assert lines[-1] == 'Total: 4 variables, 4810 values (4810 trainable)'



def test_without_learners_marks_nothing_as_trained():
  task = registry.GetParams('multi.TwoLearners').task.Instantiate()
  text = model_analysis.ModelAnalysis(task)
  assert 'Learner' not in text
  assert text.splitlines()[1].split()[-1] == '-'


def test_a_tied_variable_is_listed_once():
  task = registry.GetParams('multi.TwoLearners').task.Instantiate()

  class _Tied:
    """A task stand-in whose ModelVars hold one variable twice."""

    def ModelVars(self):
      vm = task.ModelVars()
      vm['tied'] = vm.layer_0.w
      return vm

  text = model_analysis.ModelAnalysis(_Tied())
  assert text.count('digits/layer_0/w ') == 1
  assert text.splitlines()[-1].startswith('Total: 4 variables, 4810 values')

"""The model API: what an experiment subclasses and configures.

  task.py             BaseTask: the model, its losses, learners, global_step
  task_params.py      p.train / p.eval: Lingvo's keys and defaults, then ours
  input_generator.py  BaseInputGenerator (the experiments' datasets are in
                      configs/inputs.py)
  model_analysis.py   the variables table of model_analysis.txt

Imports services/ and cluster/ only (never jobs/).
"""

"""The model API: what an experiment subclasses and configures.

  task.py             BaseTask: the model, its losses, learners, global_step
  task_params.py      p.train / p.eval: Lingvo's keys and defaults, then ours
  input_generator.py  BaseInputGenerator (the experiments' datasets are in
                      configs/inputs.py)
  model_analysis.py   the variables table of model_analysis.txt
  lr_util.py          Lingvo's car lr_util: p.train's schedule set in epochs

Imports services/ and cluster/ only (never jobs/).
"""

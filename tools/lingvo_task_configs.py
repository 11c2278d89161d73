"""The real Lingvo configs whose training blocks tools/record_lingvo_task.py
records (issue 23). Plain data; imported by the recorder only.

Each entry:
  id        our short name.
  model     the registered Lingvo class the block belongs to.
  segments  [path, first line, last line] (1-based, inclusive) of the
            `p.train` / `tp.` lines, at the recorded commit; joined and
            dedented they are the verbatim block.
  prelude   Python run before the block: the values the block reads from
            its method's arguments or its class (each with its source line),
            so the block itself runs unchanged.
  task_train_keys  keys the config's task class adds to p.train (not
            BaseTask's), {key: default}, defined before the block runs.
  stubs     names the block calls that stand for a Lingvo object other than
            the params (see the recorder's _Namespace).
"""

MT = 'lingvo/tasks/mt/base_config.py'
WMT = 'lingvo/tasks/mt/params/wmt14_en_de.py'
LM = 'lingvo/tasks/lm/params/one_billion_wds.py'
CAR = 'lingvo/tasks/car/params/'

_TRANSFORMER_BLOCK = [[MT, 202, 208]]
_RNMT_BLOCK = [[MT, 489, 505]]
_RNMT_PRELUDE = (
    '# {src}: SetupRNMTParams(..., learning_rate=1e-4,\n'
    '#   l2_regularizer_weight=1e-5, lr_warmup_steps=500,\n'
    '#   lr_decay_start=400000, lr_decay_end=1200000, lr_min=0.5,\n'
    '#   adam_beta2=0.98, adam_epsilon=1e-6); adam_beta1 defaults to 0.9\n'
    '#   (lingvo/tasks/mt/base_config.py:403).\n'
    'learning_rate = 1e-4\nl2_regularizer_weight = 1e-5\n'
    'lr_warmup_steps = 500\nlr_decay_start = 400000\n'
    'lr_decay_end = 1200000\nlr_min = 0.5\n'
    'adam_beta1 = 0.9\nadam_beta2 = 0.98\nadam_epsilon = 1e-6\n')

CONFIGS = [
    dict(id='wmt14_transformer_base',
         model='mt.params.wmt14_en_de.WmtEnDeTransformerBase',
         segments=_TRANSFORMER_BLOCK,
         prelude=('# %s:83-94: SetupTransformerParams(..., model_dim=512,\n'
                  '#   learning_rate=3.0, warmup_steps=40000)\n'
                  'model_dim = 512\nlearning_rate = 3.0\n'
                  'warmup_steps = 40000\n' % WMT)),
    dict(id='wmt14_transformer_small',
         model='mt.params.wmt14_en_de.WmtEnDeTransformerSmall',
         segments=_TRANSFORMER_BLOCK,
         prelude=('# %s:104-115: SetupTransformerParams(..., model_dim=64,\n'
                  '#   learning_rate=3.0, warmup_steps=40000)\n'
                  'model_dim = 64\nlearning_rate = 3.0\n'
                  'warmup_steps = 40000\n' % WMT)),
    dict(id='wmt14_rnmt',
         model='mt.params.wmt14_en_de.WmtEnDeRNMT',
         segments=_RNMT_BLOCK,
         prelude=_RNMT_PRELUDE.format(src=WMT + ':157-177')),
    dict(id='punctuator_codelab_rnmt',
         model='punctuator.params.codelab.RNMTModel',
         segments=_RNMT_BLOCK,
         prelude=_RNMT_PRELUDE.format(
             src='lingvo/tasks/punctuator/params/codelab.py:93-113')),
    dict(id='wmtm16_caption_transformer',
         model='mt.params.wmtm16_en_de.WmtCaptionEnDeTransformer',
         segments=_TRANSFORMER_BLOCK + [
             ['lingvo/tasks/mt/params/wmtm16_en_de.py', 89, 90]],
         prelude=('# lingvo/tasks/mt/params/wmtm16_en_de.py:76-87:\n'
                  '#   SetupTransformerParams(..., model_dim=256,\n'
                  '#   learning_rate=1.0, warmup_steps=1000)\n'
                  'model_dim = 256\nlearning_rate = 1.0\n'
                  'warmup_steps = 1000\n')),
    dict(id='one_billion_wds_lm',
         model='lm.params.one_billion_wds.WordLevelOneBwdsBase',
         segments=[[LM, 117, 133]],
         task_train_keys={  # lingvo/tasks/lm/model.py:38-45 (LanguageModel)
             'max_lstm_gradient_norm': 0.0,
             'sum_loss_across_tokens_in_batch': False}),
    dict(id='one_billion_wds_gpipe_transformer',
         model='lm.params.one_billion_wds.OneBWdsGPipeTransformerWPM',
         segments=[[LM, 250, 257]],
         prelude='# %s:184: EMBEDDING_DIM = 2048\n' % LM,
         self_attrs={'EMBEDDING_DIM': 2048}),
    dict(id='librispeech_960_base',
         model='asr.params.librispeech.Librispeech960Base',
         segments=[['lingvo/tasks/asr/params/librispeech.py', 127, 130],
                   ['lingvo/tasks/asr/params/librispeech.py', 141, 142]]),
    dict(id='mnist_lenet5',
         model='image.params.mnist.LeNet5',
         segments=[['lingvo/tasks/image/classifier.py', 120, 124],
                   ['lingvo/tasks/image/params/mnist.py', 63, 63]]),
    dict(id='kitti_starnet_cars',
         model='car.params.kitti.StarNetCarsBase',
         segments=[[CAR + 'kitti.py', 370, 372], [CAR + 'kitti.py', 379, 379],
                   [CAR + 'kitti.py', 382, 390]],
         prelude=('# The trainer input: %skitti.py:44 (num_samples = 3712),\n'
                  '#   :321 (batch_size = 2); one worker device.\n' % CAR),
         train_input={'batch_size': 2, 'num_samples': 3712},
         stubs=['lr_util', 'self.Train']),
    dict(id='waymo_starnet',
         model='car.params.waymo.StarNetBase',
         segments=[[CAR + 'waymo.py', 306, 308], [CAR + 'waymo.py', 317, 317],
                   [CAR + 'waymo.py', 334, 342]],
         prelude=('# train_input_p (waymo.py:319-331, not a p.train line):\n'
                  '#   %swaymo.py:41 (num_samples = 158361),\n'
                  '#   :230 (batch_size = 2 for a trainer); one worker.\n'
                  % CAR),
         train_input={'batch_size': 2, 'num_samples': 158361},
         stubs=['lr_util', 'train_input_p']),
    dict(id='waymo_centerpoint_vehicle',
         model='car.params.waymo_deepfusion.CenterPointImprovedVehicle',
         segments=[[CAR + 'waymo_deepfusion.py', 701, 704],
                   [CAR + 'waymo_deepfusion.py', 723, 744]],
         prelude=('# %swaymo_deepfusion.py:569-579: L2_REGULARIZER_WEIGHT\n'
                  '#   = 0, CLIP_GRADIENT_NORM_TO_VALUE = 5, EPOCH = 60,\n'
                  '#   WARM_UP_EPOCH = 3, LEARN_RATE = 3e-4; the trainer\n'
                  '#   input: :660 (batch_size = 1), waymo.py:41\n'
                  '#   (num_samples = 158361); one worker device.\n' % CAR),
         self_attrs={'L2_REGULARIZER_WEIGHT': 0,
                     'CLIP_GRADIENT_NORM_TO_VALUE': 5, 'EPOCH': 60,
                     'WARM_UP_EPOCH': 3, 'LEARN_RATE': 3e-4},
         train_input={'batch_size': 1, 'num_samples': 158361},
         stubs=['lr_util', 'TrainerInputParams', 'cluster_factory']),
    dict(id='milan_dual_encoder',
         model='milan.params.dual_encoder_recipe.DualEncoderRecipe',
         segments=[['lingvo/tasks/milan/params/dual_encoder_recipe.py',
                    85, 99]],
         prelude=('# dual_encoder_recipe.py:84 (not a p.train line):\n'
                  'self.task_params = p\n'),
         stubs=['lingvo_layers']),
    dict(id='wiki_bert_adafactor',
         model='lm.params.wiki_bert.BertTemplate',
         segments=[['lingvo/tasks/lm/params/wiki_bert.py', 111, 130]],
         prelude=('# lingvo/tasks/lm/params/wiki_bert.py:53-54: BETA1 = 0,\n'
                  '#   WARMUP_STEPS = 10000\n'),
         self_attrs={'BETA1': 0, 'WARMUP_STEPS': 10000},
         stubs=['device_assignment_lib']),
]

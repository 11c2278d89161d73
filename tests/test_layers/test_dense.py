def test_dense_layer_computes_relu_of_affine():
  layer = model_tasks.DenseLayer.Params().Set(
      name='d', input_dim=2, output_dim=2, activation='relu',
      params_init=1.0).Instantiate()
  # w = ones(2, 2), b = 0: [1, -3] @ w = [-2, -2] -> relu 0; [2, 1] -> 3.
  y = layer.FProp(layer.theta, tf.constant([[1.0, -3.0], [2.0, 1.0]]))
  np.testing.assert_allclose(y.numpy(), [[0.0, 0.0], [3.0, 3.0]])


@pytest.mark.parametrize('key,value', [('input_dim', 0),
                                       ('activation', 'gelu')])
def test_dense_layer_refuses_bad_params(key, value):
  p = model_tasks.DenseLayer.Params().Set(name='d', input_dim=2, output_dim=2)
  p.Set(**{key: value})
  with pytest.raises(ValueError, match=key):
    p.Instantiate()

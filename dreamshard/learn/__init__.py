"""Stage 4, learn: DreamShard's networks and their training on the estimated MDP.

`costnet` (the cost network), `costnet_data` (its examples from the cost dataset), `costnet_fit`
(fitting and error report), `policy` (the placement policy, its episodes, REINFORCE),
`train` and `train_config` (the alternating loop), `pretrain` (the simulated prior),
`pretrain_data` (the shipped network's broad, domain-randomised data), `shipped` (the
pre-trained model the package ships, and `dreamshard pretrain` that makes it),
`coverage` (the ranges a model was trained on), `model_file` (model files, and a model from a
file, a folder or an MLflow URI), `rnn` and `rnn_config` (the RNN baseline placer and its
training).
May import: costs, placement, tables, the root modules.
"""

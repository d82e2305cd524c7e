import sys

import ray

from hgpo_rllib import HGPOConfig

ray.init(num_cpus=2, include_dashboard=False)
config = (
    HGPOConfig()
    .environment("keychest", env_config={"max_steps": 4})
    .env_runners(num_env_runners=1, num_envs_per_env_runner=4)
    .rl_module(
        model_config={
            "tiny_model": {
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
            },
            "tokenizer_vocab_size": 400,
        }
    )
    .training(
        group_size=2,
        groups_per_iteration=2,
        max_new_tokens=8,
        max_prompt_tokens=160,
        minibatch_size=8,
        micro_batch_size=4,
        lr=1e-3,
        kl_coeff=0.01,
    )
    .debugging(seed=0)
)
algo = config.build_algo()
r = algo.train()
print("iter", r["training_iteration"], r["env_runners"]["num_episodes"])
print(algo.save_to_path(sys.argv[1]))
algo.stop()
ray.shutdown()

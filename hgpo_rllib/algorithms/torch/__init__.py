"""The torch side of the text-agent learners: the token loss, the torch learner and FSDP sharding."""

"""What the estimates know of the hardware and the models: GPU datasheets (gpus), model shapes and their
drafters (shapes), and what a mixture-of-experts layer reads per step (moe). Data and arithmetic only."""

"""Tables fitted to what a deployed system shows (``hw-profile calibrate``): telemetry read into observations of
its mean step (observations), the monotone T(B, K) fitted to them (calibrate), and an estimated table moved onto
one to three measured points (prior_fit)."""

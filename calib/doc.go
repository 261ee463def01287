// Package calib calibrates a Hugging Face model for tq's turboquant policy (`tq calibrate`,
// docs/calibration.md).
//
// [Calibrate] runs the model in full precision over a calibration set (the built-in prompts of
// package calib/prompts, prompt files, or a token file of `tq tokenize`), block by block so that
// one block's weights are in memory at a time, and accumulates statistics of the inputs of every
// linear layer ([Stats]: Σx², max|x|, counts, MoE routing). It then searches the quantization of
// the tensors the policy stores at low precision, weighted by those statistics, and writes what
// `tq convert --use-turboquant` reads: quantize_config.json ([QuantizeConfig], [SaveConfig],
// [LoadConfig]), the statistics file ([SaveStats], [LoadStats]), a llama.cpp importance matrix
// ([SaveIMatrix]; [LoadIMatrix] imports one made by llama-imatrix) and, for MoE models, the
// routing histogram. An interrupted run resumes from its last finished block.
package calib

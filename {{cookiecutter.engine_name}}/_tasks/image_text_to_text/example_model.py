"""A worked example: a complete model.py for a vision-language model from Hugging Face transformers. Copy it over
src/<package>/model.py and adapt it to your model's classes.

The model folder (MODEL_DIR) holds what `save_pretrained` writes for a BLIP question-answering model and its
processor (config.json, the weights, the tokenizer and image processor files). Add torch and transformers with
exact pins: `uv add 'torch==2.14.1' 'transformers==5.23.0'` (docs/dependencies.md, "torch, CPU or CUDA", for the CPU
build).
"""

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import BlipForQuestionAnswering, BlipProcessor

from chariot_support import BadRequest, ChariotModel, Image, PromptAnswer, TaskType


class Model(ChariotModel):
    task_type = TaskType.IMAGE_TEXT_TO_TEXT
    thread_safe = False  # one generate() at a time keeps GPU memory predictable

    def load(self, model_dir: Path) -> None:
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        torch.set_num_threads(self.threads)  # this predict's share of the cores
        self.processor = BlipProcessor.from_pretrained(model_dir)
        self.model = BlipForQuestionAnswering.from_pretrained(model_dir).to(self.device).eval()

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[PromptAnswer]]:
        results = []
        for image in images:
            if not image.prompts:  # BLIP answers questions: it has nothing to say about an image asked nothing
                raise BadRequest(f"{image.name}: this model answers questions about the image; send them in 'prompts'")
            answers = []
            for prompt in image.prompts:
                inputs = self.processor(images=image.pixels, text=prompt, return_tensors="pt").to(self.device)
                with torch.inference_mode():
                    tokens = self.model.generate(**inputs, max_new_tokens=64)
                answer = self.processor.decode(tokens[0], skip_special_tokens=True)
                answers.append(PromptAnswer(prompt=prompt, answer=answer))
            results.append(answers)
        return results

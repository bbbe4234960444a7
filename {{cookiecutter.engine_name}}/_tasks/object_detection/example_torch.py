"""A worked example: a complete model.py for a PyTorch detector, MTCNN face detection from facenet-pytorch, whose
weights ship inside its wheel. Copy it over src/<package>/model.py and adapt the lines marked `# adapt`.

Add it, with torch and torchvision as a pair built for each other, with
`uv add 'torch==2.14.1' 'torchvision==0.29.1' 'facenet-pytorch==2.5.3'` (2.6.0 pins torch<2.3, numpy<2 and
pillow<10.3, which the engine does not take without uv's overrides: docs/dependencies.md; 2.5.3 carries the same
weights with loose pins). The model folder (MODEL_DIR) may hold your own `pnet.pt`, `rnet.pt` and `onet.pt` (state dicts, as
`torch.save(network.state_dict(), ...)` writes them); without them the wheel's weights are used.

The device is "cuda" when torch sees a GPU, else "cpu"; set MODEL_DEVICE (e.g. `cpu`, `cuda:0`) to choose. With
parallel workers on a GPU node, each worker loads its own model, after the workers start, so CUDA is initialised in
each worker only; "cuda" is the first GPU the worker sees.
"""

import logging
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from facenet_pytorch import MTCNN

from chariot_support import ChariotModel, Detection, Image, TaskType

MIN_FACE_SIZE = 20  # adapt: the smallest face, in pixels, worth finding (smaller is slower)
THRESHOLDS = (0.6, 0.7, 0.7)  # adapt: each of MTCNN's three stages drops candidates scoring under its threshold

logger = logging.getLogger(__name__)  # the engine writes it as JSON lines, beside its own


class Model(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION
    # MTCNN.detect keeps nothing of a call on the model: it runs three networks whose weights are only read (eval
    # mode, no gradients), and PyTorch runs a module's forward from several threads at once. So one instance serves
    # every request: the engine runs up to CHARIOT_THREADS predicts on it at once and loads no copies (the weights,
    # on the GPU too, are held once).
    thread_safe = True

    def load(self, model_dir: Path) -> None:
        device = os.environ.get("MODEL_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")
        # The engine gives each predict running at once its share of the cores (self.threads). torch's setting is
        # the process's, not the model's: every predict running at once uses that many threads.
        torch.set_num_threads(self.threads)
        self.device = torch.device(device)
        self.mtcnn = MTCNN(keep_all=True, min_face_size=MIN_FACE_SIZE, thresholds=list(THRESHOLDS), device=self.device)
        own = []
        for name in ("pnet", "rnet", "onet"):
            weights = model_dir / f"{name}.pt"
            if weights.is_file():  # your own weights, from Chariot's model upload; else the wheel's
                state = torch.load(weights, map_location=self.device, weights_only=True)
                getattr(self.mtcnn, name).load_state_dict(state)
                own.append(name)
        self.mtcnn.eval()
        # Which device it took is the first thing to check on a GPU node: without a GPU request the pod sees none,
        # and torch falls back to the CPU without a word.
        logger.info(
            "MTCNN on %s (torch %s, %d threads per predict), weights: %s",
            self.device,
            torch.__version__,
            self.threads,
            f"{', '.join(own)} from {model_dir}" if own else "the wheel's",
        )

    def predict(self, images: Sequence[Image], tensors: Mapping[str, np.ndarray]) -> list[list[Detection]]:
        # MTCNN takes a batch of pictures of one size: pictures of the same size go through together (one pass on
        # the GPU for a batch the engine gathered), others one size at a time.
        by_size = defaultdict(list)
        for index, image in enumerate(images):
            by_size[image.pixels.shape].append(index)
        results: list[list[Detection]] = [[] for _ in images]
        with torch.inference_mode():
            for indices in by_size.values():
                batch = np.stack([images[i].pixels for i in indices])  # N x H x W x 3, RGB, as MTCNN wants it
                boxes, scores = self.mtcnn.detect(batch)
                for i, found, scored in zip(indices, boxes, scores, strict=True):
                    results[i] = self.faces(images[i], found, scored)
        return results

    def faces(self, image: Image, boxes: np.ndarray | None, scores: Sequence[float]) -> list[Detection]:
        if boxes is None:  # MTCNN's answer for a picture with no face
            return []
        # A batch's answers come as object arrays: made plain numbers here. MTCNN's boxes may reach past the
        # picture's edges for a face cut off by one: clipped to the picture.
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        boxes = np.clip(boxes, 0, [image.width, image.height, image.width, image.height])
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        return [
            Detection(label="face", score=s, xmin=x0, ymin=y0, xmax=x1, ymax=y1)
            for (x0, y0, x1, y1), s in zip(boxes.tolist(), scores.tolist(), strict=True)
            if x1 > x0 and y1 > y0
        ]

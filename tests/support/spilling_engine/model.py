"""Models whose results spill past every edge of the image, as letterboxing detectors' do, and one result of each
that lies wholly outside it."""

from chariot_support import ChariotModel, Detection, OrientedDetection, Segmentation, TaskType


class SpillingDetector(ChariotModel):
    task_type = TaskType.OBJECT_DETECTION
    thread_safe = True

    def predict(self, images, tensors):
        return [
            [
                Detection(label="top-left", score=0.9, xmin=-15, ymin=-10, xmax=20, ymax=12),
                Detection(
                    label="bottom-right",
                    score=0.8,
                    xmin=i.width - 10,
                    ymin=i.height - 8,
                    xmax=i.width + 40,
                    ymax=i.height + 5,
                ),
                Detection(label="inside", score=0.7, xmin=2, ymin=3, xmax=9, ymax=8),
                Detection(label="outside", score=0.6, xmin=i.width + 5, ymin=0, xmax=i.width + 50, ymax=10),
            ]
            for i in images
        ]


class SpillingOrientedDetector(ChariotModel):
    task_type = TaskType.ORIENTED_OBJECT_DETECTION
    thread_safe = True

    def predict(self, images, tensors):
        return [
            [
                # centred on the top-left corner, turned: past the left and top edges
                OrientedDetection(label="corner", score=0.9, cx=0.0, cy=0.0, w=0.5, h=0.3, r=0.4),
                # the whole image and more, turned: past every edge
                OrientedDetection(label="everything", score=0.8, cx=0.5, cy=0.5, w=1.4, h=1.2, r=-0.3),
                OrientedDetection(label="inside", score=0.7, cx=0.5, cy=0.5, w=0.1, h=0.1, r=0.0),
            ]
            for i in images
        ]


class SpillingSegmenter(ChariotModel):
    task_type = TaskType.IMAGE_SEGMENTATION
    thread_safe = True

    def predict(self, images, tensors):
        results = []
        for i in images:
            w, h = i.width, i.height
            around = [{"x": -5, "y": -5}, {"x": w + 5, "y": -5}, {"x": w + 5, "y": h + 5}, {"x": -5, "y": h + 5}]
            outside = [{"x": w + 1, "y": 0}, {"x": w + 9, "y": 0}, {"x": w + 9, "y": 9}]
            results.append(
                [
                    Segmentation(label="around", score=0.9, contour=[around, outside]),
                    Segmentation(label="outside", score=0.8, contour=[outside]),
                ]
            )
        return results


MODELS = {m.task_type.value: m for m in (SpillingDetector, SpillingOrientedDetector, SpillingSegmenter)}

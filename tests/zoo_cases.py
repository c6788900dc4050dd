"""The model zoo at the small sizes the tests build it (tessel.graph.frontend.models keyword
arguments):
a few MFLOPs per model, every operator of the full size kept."""
ZOO_SMALL = {
    "resnet18": dict(image=32),
    "mobilenet_v2": dict(image=32),
    "squeezenet": dict(image=39),
    "bert_layer": dict(seq=8),
    "dqn": dict(),
    "dcgan_generator": dict(width=16),
}
